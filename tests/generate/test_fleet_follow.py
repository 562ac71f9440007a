"""A running job follows the fleet state: a replacement joins once verified, not while it starts."""

from __future__ import annotations

import asyncio
import logging

from fleetgen.fleet.state import FleetState, ReplicaState, write_state
from fleetgen.generate.dispatch.dispatcher import Dispatcher
from fleetgen.generate.dispatch.fleet_follow import follow_fleet


def _replica(index: int, endpoint: str, verified: bool) -> ReplicaState:
    return ReplicaState(
        index=index,
        endpoint=endpoint,
        pid=1,
        create_time=0.0,
        engine="vllm",
        model="m",
        served_model_name="m",
        log_path="x.log",
        command=["serve"],
        effective_config={"model": "m"} if verified else {},
    )


def _write(state_dir, replicas: list[ReplicaState]) -> None:
    write_state(state_dir, FleetState(engine="vllm", model="m", served_model_name="m", replicas=replicas))


async def _settle(watch_s: float = 0.1) -> None:
    await asyncio.sleep(watch_s * 3)


async def test_a_replacement_joins_when_verified_and_a_grown_fleet_is_only_noted(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="fleetgen")
    a, b = _replica(0, "http://a:1", True), _replica(1, "http://b:1", True)
    _write(tmp_path, [a, b])
    d = Dispatcher([a.endpoint, b.endpoint], 4)
    watch = asyncio.create_task(follow_fleet(tmp_path, d, poll_s=0.05))
    try:
        await _settle()
        assert [r.endpoint for r in d.replicas] == ["http://a:1", "http://b:1"]
        _write(tmp_path, [a, _replica(1, "http://c:2", False)])  # launched, still loading
        await _settle()
        assert d.replicas[1].endpoint == "http://b:1"
        _write(tmp_path, [a, _replica(1, "http://c:2", True)])  # verified
        await _settle()
        assert d.replicas[1].endpoint == "http://c:2"
        _write(tmp_path, [a, _replica(1, "http://c:2", True), _replica(2, "http://d:3", True)])
        await _settle()
        assert len(d.replicas) == 2
    finally:
        watch.cancel()
    err = caplog.text
    assert "replica 1 was replaced; new requests go to http://c:2" in err
    assert "the fleet now has 3 replicas, this run keeps its 2" in err


async def test_a_slice_of_the_fleet_follows_only_its_own_replicas(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="fleetgen")
    from fleetgen.generate.config.partition import Shard

    fleet = [_replica(i, f"http://r{i}:1", True) for i in range(4)]
    _write(tmp_path, fleet)
    d = Dispatcher([fleet[1].endpoint, fleet[3].endpoint], 4)  # slice 1/2: replicas 1 and 3
    watch = asyncio.create_task(follow_fleet(tmp_path, d, Shard(1, 2), poll_s=0.05))
    try:
        await _settle()
        _write(tmp_path, [*fleet[:3], _replica(3, "http://new3:2", True)])
        await _settle()
        assert [r.endpoint for r in d.replicas] == ["http://r1:1", "http://new3:2"]
        _write(tmp_path, [_replica(0, "http://new0:2", True), *fleet[1:3], _replica(3, "http://new3:2", True)])
        await _settle()
        assert [r.endpoint for r in d.replicas] == ["http://r1:1", "http://new3:2"]  # replica 0 is another slice's
    finally:
        watch.cancel()
    assert "replica 3 was replaced" in caplog.text
