"""Is a starting replica ready: phases and fatal lines from its log, health, a real generation, its config.

Works for any backend: it reads the log through the backend's LogFollower and asks the backend's
Liveness whether the server is gone; the checks themselves go over HTTP to the replica's endpoint.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from fleetgen.errors import ConfigMismatchError, ReplicaStartError
from fleetgen.fleet import probe
from fleetgen.fleet.backend import Liveness
from fleetgen.fleet.config import FleetConfig
from fleetgen.fleet.engines import Engine, Phase
from fleetgen.fleet.logtail import LogFollower
from fleetgen.fleet.spawn import exit_of
from fleetgen.fleet.state import ReplicaState

log = logging.getLogger(__name__)

# Fields whose values legitimately differ across healthy replicas (free memory differs per GPU).
SOFT_CONFIG_FIELDS = frozenset({"cache.num_gpu_blocks", "max_total_num_tokens"})
# Differ by design where replicas share a GPU: each is given its own memory share (replicas_per_gpu),
# and the later ones the first one's KV pool as a cap that it started without (equal_memory.py).
SHARING_SOFT_FIELDS = frozenset({"mem_fraction_static", "cache.gpu_memory_utilization", "max_total_tokens"})


@dataclass
class ReplicaProgress:
    """One update of a replica's start-up, for the CLI's live view."""

    index: int
    phase: Phase
    elapsed_s: float
    detail: str = ""


ProgressCallback = Callable[[ReplicaProgress], None]


async def wait_ready(
    engine: Engine,
    replica: ReplicaState,
    proc: subprocess.Popen | Liveness,
    config: FleetConfig,
    api_key: str | None,
    on_progress: ProgressCallback | None,
    *,
    follower: LogFollower | None = None,
) -> dict[str, object]:
    """Follow the log, then health, a real generation and the reported config; returns that config."""
    t0 = time.monotonic()
    gone = proc if callable(proc) else exit_of(proc)
    follower = follower or LogFollower(Path(replica.log_path))
    phase = Phase.STARTING
    last_progress = t0

    def emit(detail: str = "") -> None:
        if on_progress:
            on_progress(ReplicaProgress(replica.index, phase, time.monotonic() - t0, detail))

    def fail(message: str, hint: str) -> ReplicaStartError:
        nonlocal phase
        phase = Phase.FAILED
        emit(message)
        return ReplicaStartError(
            f"replica {replica.index} ({replica.endpoint}): {message}; log: {replica.log_path}",
            hint=hint,
            log_tail=follower.tail(25),
        )

    emit()
    async with aiohttp.ClientSession(headers=probe.auth_headers(api_key)) as session:
        while True:
            for line in await follower.new_lines():
                last_progress = time.monotonic()
                timed = engine.timing_of(line)
                if timed:
                    replica.startup_timings[timed[0]] = timed[1]
                fatal = engine.fatal_of(line)
                if fatal:
                    raise fail(f"fatal log line: {line.strip()[:300]}", fatal.hint)
                new_phase = engine.phase_of(line)
                if new_phase and new_phase.order > phase.order:  # logs repeat; phases only advance
                    phase = new_phase
                    emit()
            why = await gone()
            if why is not None:
                await follower.new_lines()
                raise fail(f"{why} while starting", _hint_from_tail(engine, follower))
            status, _ = await probe.health(session, replica.endpoint, engine, timeout=3)
            if status == 200:
                phase = Phase.PROBING
                emit()
                result = await probe.generation_probe(session, replica.endpoint, replica.served_model_name)
                if not result.ok:
                    raise fail(f"health is 200 but a real generation failed: {result.detail}", "read the log")
                reported = await probe.reported_config(session, replica.endpoint, engine)
                phase = Phase.READY
                timings = "".join(f"; {k} {v:.1f}s" for k, v in replica.startup_timings.items())
                emit(f"probe: {result.text.strip()[:60]!r} in {result.latency_s:.2f}s{timings}")
                return reported
            now = time.monotonic()
            if now - t0 > config.startup_timeout_s:
                raise fail(
                    f"not ready after {config.startup_timeout_s:.0f}s", "raise startup_timeout_s or read the log"
                )
            if now - last_progress > config.stall_timeout_s:
                raise fail(
                    f"no log progress for {config.stall_timeout_s:.0f}s (stuck in {phase.value})",
                    "the server hangs: read the log; raise stall_timeout_s if it is only slow",
                )
            emit()
            await asyncio.sleep(1.0)


def _hint_from_tail(engine: Engine, follower: LogFollower) -> str:
    for line in reversed(follower.tail(200).splitlines()):
        fatal = engine.fatal_of(line)
        if fatal:
            return fatal.hint
    return "read the log lines above"


def record_configs(
    replicas: list[ReplicaState], configs: list[dict[str, object]], soft_fields: frozenset[str] = SOFT_CONFIG_FIELDS
) -> None:
    """Refuse replicas that report different configurations; store each one's on its state."""
    hard, soft = probe.compare_configs(configs, soft_fields)
    if hard:
        raise ConfigMismatchError(
            "replicas report different configurations: " + "; ".join(hard),
            hint="every replica must run the same model and flags; check the logs and --engine-args",
        )
    for r, c in zip(replicas, configs):
        r.effective_config = c
    for line in soft:
        log.info(f"replicas differ in {line}")
