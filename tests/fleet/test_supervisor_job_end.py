"""A job that ends while a replica is still restarting says so, rather than showing a death and no restart.

No engine: the fleet state names a replica whose process is gone (a pid that exited), so the
supervisor finds it dead and starts a restart that waits out a long back-off; the job ends first.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys

from fleetgen.fleet.state import FleetState, ReplicaState, write_state
from fleetgen.fleet.supervisor import Supervisor


def test_a_job_that_ends_mid_restart_logs_the_restart_as_abandoned(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    replica = ReplicaState(
        index=0,
        endpoint="http://127.0.0.1:9",
        pid=gone.pid,
        create_time=0.0,
        engine="vllm",
        model="m",
        served_model_name="m",
        log_path="x.log",
        command=["serve"],
        effective_config={"model": "m"},
    )
    write_state(tmp_path, FleetState(engine="vllm", model="m", served_model_name="m", replicas=[replica]))
    said: list[str] = []

    async def job() -> Supervisor:
        async with Supervisor(
            tmp_path,
            check_interval_s=0.05,
            backoff_s=3600,
            on_event=lambda e: said.append(f"replica {e.index}: {e.kind} {e.detail}"),
        ) as sup:
            while not sup.restarting:  # the job runs until the supervisor has begun the restart
                await asyncio.sleep(0.01)
        return sup

    sup = asyncio.run(job())
    assert [e.kind for e in sup.events] == ["dead", "restart_abandoned"]
    assert (
        said[-1] == "replica 0: restart_abandoned the job ended while it was still restarting; the restart is cancelled"
    )
    assert sup.restarting == []


def _dead_replica_fleet(tmp_path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    replica = ReplicaState(
        index=0,
        endpoint="http://127.0.0.1:9",
        pid=gone.pid,
        create_time=0.0,
        engine="vllm",
        model="m",
        served_model_name="m",
        log_path="x.log",
        command=["serve"],
        effective_config={"model": "m"},
    )
    write_state(tmp_path, FleetState(engine="vllm", model="m", served_model_name="m", replicas=[replica]))


def test_a_kept_fleet_waits_for_the_restart_within_a_bound_and_names_what_is_missing(tmp_path):
    # Whether or not the loop has looked yet, complete_restarts finds the dead replica and starts its restart.
    # That restart waits out a one-hour back-off, so the bound given (0.2 s) ends the wait first on any machine:
    # the restart is cancelled and the line names what the kept fleet lacks.
    _dead_replica_fleet(tmp_path)

    async def job() -> tuple[Supervisor, list[int]]:
        async with Supervisor(tmp_path, check_interval_s=3600, backoff_s=3600) as sup:
            missing = await sup.complete_restarts(timeout_s=0.2)
        return sup, missing

    sup, missing = asyncio.run(job())
    assert [e.kind for e in sup.events] == ["dead", "awaiting_restart", "restart_abandoned"]
    assert sup.events[1].detail == "the job ended and the fleet is kept: waiting up to 0s for its restart"
    assert sup.events[2].detail == "not ready within 0s; the kept fleet lacks it"
    assert missing == [0]
    assert sup.restarting == []
