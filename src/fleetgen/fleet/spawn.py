"""Run an engine server as its own detached process group on this machine, and describe it for the state.

Every backend's servers are started through here: the local backend on this machine, the Ray
backend's actor on its node.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from fleetgen.fleet.backend import Liveness
from fleetgen.fleet.engines import Engine, ReplicaSpec
from fleetgen.fleet.process import started
from fleetgen.fleet.state import ReplicaState


def spawn(
    engine: Engine, spec: ReplicaSpec, log_path: Path, python: str, extra_env: dict[str, str]
) -> subprocess.Popen:
    """Start the server in its own session so it outlives `up` and dies with its process group."""
    env = dict(os.environ)
    env.update(extra_env)
    env.update(engine.environment(spec))
    env.pop("FLEETGEN_API_KEY", None)
    if spec.cache_dir is not None:
        spec.cache_dir.mkdir(parents=True, exist_ok=True)
    cpus = set(spec.cpus)
    log = open(log_path, "ab", buffering=0)
    try:
        return subprocess.Popen(
            engine.command(spec, python),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
        )
    finally:
        log.close()


def describe(
    engine: Engine, spec: ReplicaSpec, pid: int, log_path: Path, python: str, endpoint: str, **where: object
) -> ReplicaState:
    """What the state records of a server just spawned; `where` adds the backend's fields (node, actor)."""
    create_time, boot_time = started(pid)
    return ReplicaState(
        index=spec.index,
        endpoint=endpoint,
        pid=pid,
        create_time=create_time,
        boot_time=boot_time,
        engine=engine.name,
        model=spec.model,
        served_model_name=spec.served_model_name,
        gpus=list(spec.gpus),
        cpus=list(spec.cpus),
        log_path=str(log_path),
        command=redact(engine.command(spec, python), spec.api_key),
        **where,
    )


def redact(cmd: list[str], secret: str | None) -> list[str]:
    """The command line as the state and logs may show it: the API key replaced by ***."""
    return [("***" if secret and a == secret else a) for a in cmd]


def exit_of(proc: subprocess.Popen) -> Liveness:
    """Liveness of a server this process spawned."""

    async def gone() -> str | None:
        return None if (code := proc.poll()) is None else f"the server exited with code {code}"

    return gone
