"""The supervisor restarts a real replica killed with SIGKILL, in place (same port)."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
from real_fleet import engine_available, start_fleet

from fleetgen.fleet import down, fleet_status, read_state
from fleetgen.fleet.supervisor import Supervisor

pytestmark = pytest.mark.engine


def test_killed_replica_is_restarted_in_place(tmp_path):
    why = engine_available()
    if why:
        pytest.skip(f"real engine unavailable: {why}")
    state_dir = tmp_path / "fleet"
    fleet = start_fleet(state_dir, replicas=1)
    old = fleet.replicas[0]
    try:

        async def scenario():
            async with Supervisor(state_dir, check_interval_s=0.5, backoff_s=0.1, hang_timeout_s=60) as sup:
                os.kill(old.pid, signal.SIGKILL)
                for _ in range(600):
                    if any(e.kind == "restarted" for e in sup.events):
                        break
                    await asyncio.sleep(0.5)
                return sup

        sup = asyncio.run(scenario())
        kinds = [e.kind for e in sup.events]
        assert kinds[:2] == ["dead", "restarted"], kinds
        assert sup.restarts == {0: 1}
        new = read_state(state_dir).replicas[0]
        assert new.pid != old.pid and new.endpoint == old.endpoint
        assert new.effective_config == old.effective_config
        _, statuses = asyncio.run(fleet_status(state_dir, sample_s=0))
        assert statuses[0].healthy
    finally:
        down(state_dir, grace_s=10)
