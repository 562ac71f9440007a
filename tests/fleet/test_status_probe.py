"""`fleetgen status` probes replicas with the standard library (no aiohttp at start): the same answers as before.

The replica here is the stand-in server (tests/generate/standin_server.py: a stand-in, not an
engine: /health and vLLM-named /metrics lines are what status reads), recorded in a fleet state
with this test's own pid as its process; a second replica points at a closed port.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from pathlib import Path

import psutil
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "generate"))
from standin_server import StandinServer  # noqa: E402

from fleetgen.fleet.state import FleetState, ReplicaState, write_state  # noqa: E402
from fleetgen.fleet.status import fleet_status  # noqa: E402

KEY = "sk-status-test"


class KeyedStandin(StandinServer):
    """The stand-in, answering 401 to any request without the bearer key (as an engine started with --api-key)."""

    def app(self) -> web.Application:
        app = super().app()

        @web.middleware
        async def auth(request, handler):
            if request.headers.get("Authorization") != f"Bearer {KEY}":
                return web.Response(status=401, text="unauthorized")
            return await handler(request)

        app.middlewares.append(auth)
        return app


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _state(tmp_path: Path, url: str) -> Path:
    me = psutil.Process(os.getpid())
    replica = dict(
        pid=me.pid,
        create_time=me.create_time(),
        engine="vllm",
        model="m",
        served_model_name="m",
        log_path=str(tmp_path / "log"),
        command=["x"],
    )
    write_state(
        tmp_path,
        FleetState(
            engine="vllm",
            model="m",
            served_model_name="m",
            replicas=[
                ReplicaState(index=0, endpoint=url, **replica),
                ReplicaState(index=1, endpoint=f"http://127.0.0.1:{_closed_port()}", **replica),
            ],
        ),
    )
    return tmp_path


def test_status_reads_health_and_metrics_and_sees_an_unreachable_replica(tmp_path):
    server = StandinServer()
    url = server.start()
    try:
        server.generated_tokens = 1234
        _, (up, gone) = asyncio.run(fleet_status(_state(tmp_path, url), sample_s=0))
    finally:
        server.stop()
    assert up.alive and up.healthy and up.health_status == 200 and up.probe_latency_ms is not None
    assert up.running == 0 and up.generation_tokens_total == 1234
    assert gone.alive and not gone.healthy and gone.health_status is None and gone.running is None


def test_status_sends_the_api_key(tmp_path):
    server = KeyedStandin()
    url = server.start()
    try:
        state = _state(tmp_path, url)
        _, (without, _) = asyncio.run(fleet_status(state, sample_s=0))
        _, (keyed, _) = asyncio.run(fleet_status(state, api_key=KEY, sample_s=0))
    finally:
        server.stop()
    assert without.health_status == 401 and not without.healthy
    assert keyed.health_status == 200 and keyed.healthy and keyed.running == 0
