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

from faultkit import Recorder  # noqa: E402


@pytest.fixture(scope="session")
def recorder() -> Recorder:
    return Recorder()
