# Sourced by the setup scripts. pip_install VENV ARGS... installs ARGS into VENV with uv where uv can
# honour this machine's pip configuration (scripts/uv_pip.py maps it, or refuses), else with pip.
# uv is pinned: its flags and resolver change between releases, and this is the release these
# scripts were timed and tested with (BENCHMARKS.md, "Quickstart"). FLEETGEN_NO_UV=1 forces pip.
UV_VERSION=0.13.9

_has_uv() { "$1/bin/uv" --version 2>/dev/null | grep -q "^uv $UV_VERSION\b"; }

# uv_ready VENV: the pinned uv is in VENV (installed there if need be), and allowed (no FLEETGEN_NO_UV).
uv_ready() {
  [ -z "${FLEETGEN_NO_UV:-}" ] \
    && { _has_uv "$1" || "$1/bin/python" -m pip install --quiet "uv==$UV_VERSION" >/dev/null 2>&1; }
}

# uv_pip VENV COMMAND ARGS...: `uv pip COMMAND` with pip's configuration (non-zero where uv cannot honour it).
uv_pip() {
  local venv=$1
  shift
  "$venv/bin/python" scripts/uv_pip.py "$venv/bin/python" "$venv/bin/uv" -- "$@"
}

pip_install() {
  local venv=$1
  shift
  if uv_ready "$venv" && uv_pip "$venv" install --quiet "$@"; then
    return 0
  fi
  [ -n "${FLEETGEN_NO_UV:-}" ] || echo "pip_install: uv did not install $*; installing with pip" >&2
  "$venv/bin/python" -m pip install --quiet --upgrade pip
  "$venv/bin/python" -m pip install --quiet "$@"
}

# say TEXT: one line of a setup's progress, with the seconds since the script started.
say() { printf '[setup %3ds] %s\n' "$SECONDS" "$*" >&2; }

# ticking LABEL CMD...: run CMD, saying every 10 s that LABEL is still going (a quiet install says nothing).
ticking() {
  local label=$1
  shift
  "$@" &
  local pid=$! start=$SECONDS
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    if kill -0 "$pid" 2>/dev/null && [ $(( (SECONDS - start) % 10 )) -eq 0 ] && [ $((SECONDS - start)) -gt 0 ]; then
      say "  $label: $((SECONDS - start)) s so far"
    fi
  done
  wait "$pid"
}
