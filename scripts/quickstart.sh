#!/usr/bin/env bash
# The main job on the embedded default (vLLM CPU + SmolLM2), on a machine without a GPU:
# set up what the main job needs (scripts/setup.sh: no test tools, Ray or SGLang parser venv),
# then mix -> up -> generate -> down -> export -> report from examples/quickstart.yaml.
# Usage: bash scripts/quickstart.sh        (a second run resumes: finished stages are skipped)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
args=()
[ -f runs/quickstart/stages.json ] && args+=(--resume)
exec .venv/bin/fleetgen run examples/quickstart.yaml "${args[@]}"
