#!/usr/bin/env bash
# Set up everything the tests need (scripts/setup-dev.sh) and run the whole test suite, real engine included.
# Usage: bash scripts/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-dev.sh
exec .venv/bin/python -m pytest -ra --timeout=900 "$@" tests
