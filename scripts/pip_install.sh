# Sourced by the setup scripts. pip_install VENV ARGS... installs ARGS into VENV with uv where uv can
# honour this machine's pip configuration (scripts/uv_pip.py maps it, or refuses), else with pip.
# uv is pinned: its flags and resolver change between releases, and this is the release these
# scripts were timed and tested with (BENCHMARKS.md, "Quickstart"). FLEETGEN_NO_UV=1 forces pip.
UV_VERSION=0.13.9

_has_uv() { "$1/bin/uv" --version 2>/dev/null | grep -q "^uv $UV_VERSION\b"; }

pip_install() {
  local venv=$1
  shift
  if [ -z "${FLEETGEN_NO_UV:-}" ] \
     && { _has_uv "$venv" || "$venv/bin/python" -m pip install --quiet "uv==$UV_VERSION" >/dev/null 2>&1; } \
     && "$venv/bin/python" scripts/uv_pip.py "$venv/bin/python" "$venv/bin/uv" -- install --quiet "$@"; then
    return 0
  fi
  [ -n "${FLEETGEN_NO_UV:-}" ] || echo "pip_install: uv did not install $*; installing with pip" >&2
  "$venv/bin/python" -m pip install --quiet --upgrade pip
  "$venv/bin/python" -m pip install --quiet "$@"
}
