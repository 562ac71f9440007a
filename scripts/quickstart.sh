#!/usr/bin/env bash
# The main job on the embedded default (vLLM CPU + SmolLM2), on a machine without a GPU.
# Usage: bash scripts/quickstart.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
STATE=.fleetgen/quickstart
trap '.venv/bin/fleetgen down --state "$STATE"' EXIT
.venv/bin/fleetgen up --engine vllm --model smollm2 --replicas 2 --gpus none --enforce-eager --state "$STATE"
.venv/bin/fleetgen status --state "$STATE"
