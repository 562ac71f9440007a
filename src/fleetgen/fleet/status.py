"""`status`: is each replica alive, healthy, how loaded, and how much GPU memory its processes hold.

Its two GET requests a replica go through the standard library's http.client in threads, not
aiohttp: `fleetgen status` is a short command, and importing aiohttp (which builds its SSL
contexts at import) would cost more than all of status's own work; the probes of `up` (probe.py)
stay on aiohttp.
"""

from __future__ import annotations

import asyncio
import http.client
import time
import urllib.parse
from dataclasses import asdict, dataclass
from pathlib import Path

from fleetgen.fleet.backend_lookup import backend_for
from fleetgen.fleet.engines import Engine, Metrics, get_engine
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


async def fleet_status(
    state_dir: Path, *, api_key: str | None = None, sample_s: float = 1.0
) -> tuple[FleetState, list[ReplicaStatus]]:
    """Read the state and check every replica; throughput is measured over `sample_s` seconds."""
    state = read_state(state_dir)
    engine = get_engine(state.engine)
    backend = backend_for(state)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    async def one(r: ReplicaState) -> ReplicaStatus:
        alive = await asyncio.to_thread(backend.alive, r)
        code, latency = await _health(r.endpoint, engine, headers)
        before = await _metrics(r.endpoint, engine, headers) if code == 200 else None
        rate = None
        after = before
        if before is not None and before.generation_tokens_total is not None and sample_s > 0:
            await asyncio.sleep(sample_s)
            after = await _metrics(r.endpoint, engine, headers) or before
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


def _get(url: str, headers: dict[str, str], timeout: float) -> tuple[int | None, bytes]:
    """(HTTP status, body) of a GET, or (None, b"") when the server cannot be reached or answers garbage."""
    u = urllib.parse.urlsplit(url)
    cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
    conn = cls(u.hostname or "127.0.0.1", u.port, timeout=timeout)
    try:
        conn.request("GET", (u.path or "/") + (f"?{u.query}" if u.query else ""), headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    except (OSError, http.client.HTTPException, ValueError):
        return None, b""
    finally:
        conn.close()


async def _health(base: str, engine: Engine, headers: dict[str, str], timeout: float = 5.0) -> tuple[int | None, float]:
    """(HTTP status or None when unreachable, latency in seconds): probe.health's answer, without aiohttp."""
    t0 = time.perf_counter()
    code, _ = await asyncio.to_thread(_get, base + engine.health_path, headers, timeout)
    return code, time.perf_counter() - t0


async def _metrics(base: str, engine: Engine, headers: dict[str, str]) -> Metrics | None:
    code, body = await asyncio.to_thread(_get, base + engine.metrics_path, headers, 5.0)
    return engine.parse_metrics(body.decode("utf-8", "replace")) if code == 200 else None
