"""`status`: is each replica alive, healthy, how loaded, and how much GPU memory its processes hold."""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass
from pathlib import Path

import aiohttp

from fleetgen.fleet import probe
from fleetgen.fleet.backends import backend_for
from fleetgen.fleet.engines import get_engine
from fleetgen.fleet.state import FleetState, ReplicaState, read_state


@dataclass
class ReplicaStatus:
    index: int
    endpoint: str
    pid: int
    alive: bool
    healthy: bool
    health_status: int | None
    probe_latency_ms: float | None
    running: float | None
    waiting: float | None
    generation_tokens_total: float | None
    tokens_per_s: float | None
    gpu_memory_mib: float | None
    memory_mib: float | None
    gpus: list[int]
    log_path: str
    node: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


async def fleet_status(state_dir: Path, *, api_key: str | None = None, sample_s: float = 1.0) -> tuple[FleetState, list[ReplicaStatus]]:
    """Read the state and check every replica; throughput is measured over `sample_s` seconds."""
    state = read_state(state_dir)
    engine = get_engine(state.engine)
    backend = backend_for(state)
    async with aiohttp.ClientSession(headers=probe.auth_headers(api_key)) as session:

        async def one(r: ReplicaState) -> ReplicaStatus:
            alive = await asyncio.to_thread(backend.alive, r)
            code, latency = await probe.health(session, r.endpoint, engine)
            before = await probe.metrics(session, r.endpoint, engine) if code == 200 else None
            rate = None
            after = before
            if before is not None and before.generation_tokens_total is not None and sample_s > 0:
                await asyncio.sleep(sample_s)
                after = await probe.metrics(session, r.endpoint, engine) or before
                if after.generation_tokens_total is not None:
                    rate = (after.generation_tokens_total - before.generation_tokens_total) / sample_s
            usage = await asyncio.to_thread(backend.usage, r) if alive else (None, None)
            return ReplicaStatus(
                index=r.index,
                endpoint=r.endpoint,
                pid=r.pid,
                alive=alive,
                healthy=alive and code == 200,
                health_status=code,
                probe_latency_ms=round(latency * 1000, 1) if code is not None else None,
                running=after.running if after else None,
                waiting=after.waiting if after else None,
                generation_tokens_total=after.generation_tokens_total if after else None,
                tokens_per_s=rate,
                gpu_memory_mib=usage[1],
                memory_mib=usage[0],
                gpus=r.gpus,
                log_path=r.log_path,
                node=r.node,
            )

        statuses = await asyncio.gather(*(one(r) for r in state.replicas))
    return state, list(statuses)

