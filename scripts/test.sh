#!/usr/bin/env bash
# Set up everything the tests need (scripts/setup-dev.sh), lint, and run the whole test suite, real engine included.
# Usage: bash scripts/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-dev.sh
# Lint first (rules in pyproject's [tool.ruff]): a finding fails the run before the 20 minutes of tests.
.venv/bin/ruff check .
exec .venv/bin/python -m pytest -ra --durations=40 --timeout=900 "$@" tests
