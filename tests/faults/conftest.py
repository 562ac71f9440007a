"""The fault campaign (issue 10): each test injects one fault, audits the output directory and records a row.

Rows go to $FLEETGEN_FAULTS_RESULTS (default out/faults/) as one JSON file per fault;
`python bench/reliability_table.py` turns them into the table of RELIABILITY.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# Reuse the generate tests' stand-in server and helpers rather than copies of them.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "generate"))

import importlib.util  # noqa: E402

from faultkit import Recorder  # noqa: E402

# This conftest shadows tests/conftest.py as `conftest`: re-export the fleet helpers from it.
_spec = importlib.util.spec_from_file_location("_root_conftest", Path(__file__).resolve().parents[1] / "conftest.py")
_root = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_root)
engine_available, start_fleet, free_port_base = _root.engine_available, _root.start_fleet, _root.free_port_base


@pytest.fixture(scope="session")
def recorder() -> Recorder:
    return Recorder()
