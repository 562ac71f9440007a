"""The Ray actor that runs one replica's engine server on its node, and kills it with the actor."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import ray

from fleetgen.errors import PortInUseError
from fleetgen.fleet.devices import claim_cores
from fleetgen.fleet.engines import ReplicaSpec, get_engine
from fleetgen.fleet.net import check_port_free, free_port
from fleetgen.fleet.process import stop_processes
from fleetgen.fleet.replica_plan import engine_cache_dir
from fleetgen.fleet.spawn import describe, spawn
from fleetgen.fleet.state import ReplicaState
from fleetgen.fleet.usage import gpu_memory_of, memory_of

# Runs beside the server: when the actor's worker dies (node lost, actor killed), this process is
# re-parented and kills the server's whole process group, so no server outlives its actor.
_SENTINEL = """
import os, signal, sys, time
parent, group = os.getppid(), int(sys.argv[1])
while os.getppid() == parent:
    time.sleep(0.5)
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        sys.exit(0)
try:
    os.killpg(group, signal.SIGKILL)
except ProcessLookupError:
    pass
"""


@ray.remote(max_restarts=0)
class ReplicaServer:
    """One replica's engine server on the node Ray placed this actor on."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.sentinel: subprocess.Popen | None = None
        self.ctime, self.boot = 0.0, None
        self.log_path: Path | None = None
        self.core_locks: list[int] = []

    def start(
        self,
        engine_name: str,
        spec: ReplicaSpec,
        python: str | None,
        extra_env: dict[str, str],
        fleet_id: str,
        bind_all: bool,
        any_port: bool,
        cpu_cores: int,
    ) -> ReplicaState:
        from fleetgen.models import resolve_model

        engine = get_engine(engine_name)
        node_ip = ray.util.get_node_ip_address()
        gpus = tuple(int(g) for g in ray.get_gpu_ids())
        cpus: tuple[int, ...] = ()
        if cpu_cores:  # a CPU replica (0 on GPUs): own cores, as a local fleet gives each replica its share
            cpus, self.core_locks = claim_cores(cpu_cores, Path(tempfile.gettempdir()) / "fleetgen-ray" / "cores")
        spec = dataclasses.replace(
            spec,
            model=resolve_model(spec.model),
            host=spec.host if bind_all else node_ip,
            gpus=gpus,
            cpus=cpus,
            cache_dir=engine_cache_dir(engine.name, spec.index),
        )
        try:
            check_port_free(spec.host, spec.port)
        except PortInUseError:
            if not any_port:
                raise
            # A replacement: the dead server's port may linger in TIME_WAIT; the endpoint is reported anyway.
            spec = dataclasses.replace(spec, port=free_port(spec.host))
        log_dir = Path(tempfile.gettempdir()) / "fleetgen-ray" / fleet_id
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"replica-{spec.index}.log"
        self.log_path.write_bytes(b"")
        python = python or sys.executable
        self.proc = spawn(engine, spec, self.log_path, python, extra_env)
        self.sentinel = subprocess.Popen(
            [sys.executable, "-c", _SENTINEL, str(self.proc.pid)], stdin=subprocess.DEVNULL, start_new_session=True
        )
        replica = describe(
            engine,
            spec,
            self.proc.pid,
            self.log_path,
            python,
            f"http://{node_ip}:{spec.port}",
            node=node_ip,
            node_id=ray.get_runtime_context().get_node_id(),
        )
        self.ctime, self.boot = replica.create_time, replica.boot_time
        return replica

    def poll(self) -> int | None:
        """None while the server runs, else its exit code."""
        return None if self.proc is None else self.proc.poll()

    def read_log(self, offset: int) -> bytes:
        if self.log_path is None:
            return b""
        with open(self.log_path, "rb") as f:
            f.seek(offset)
            return f.read(1 << 20)

    def usage(self) -> tuple[float | None, float | None]:
        if self.proc is None or self.proc.poll() is not None:
            return None, None
        me = ReplicaState.model_construct(
            pid=self.proc.pid, create_time=self.ctime, boot_time=self.boot, gpus=[int(g) for g in ray.get_gpu_ids()]
        )
        return memory_of(me), (gpu_memory_of(me) if me.gpus else None)

    def stop(self, grace_s: float) -> int:
        """Stop the server's process tree; the actor itself is killed by the caller."""
        stopped = stop_processes([(self.proc.pid, self.ctime, self.boot)], grace_s=grace_s) if self.proc else []
        if self.sentinel is not None:
            self.sentinel.kill()
            self.sentinel.wait()
        for fd in self.core_locks:
            os.close(fd)
        self.core_locks = []
        return len(stopped)
