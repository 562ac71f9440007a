"""Local backend: each replica is a detached process group on this machine."""

from __future__ import annotations

import sys

from fleetgen.errors import ConfigError, FleetError
from fleetgen.fleet.backend import Devices, Launch, StartedReplica
from fleetgen.fleet.config import FleetConfig
from fleetgen.fleet.devices import cpu_shares, gpu_groups, gpu_kind
from fleetgen.fleet.engines import Engine, ReplicaSpec
from fleetgen.fleet.logtail import LogFollower
from fleetgen.fleet.net import check_port_free, endpoint_of, is_loopback
from fleetgen.fleet.process import is_alive, stop_processes
from fleetgen.fleet.spawn import describe, exit_of, spawn
from fleetgen.fleet.state import FleetState, ReplicaState
from fleetgen.fleet.usage import gpu_memory_of, memory_of
from fleetgen.gpu_info import discover_gpus
from fleetgen.models import resolve_model


class LocalBackend:
    """Replicas are detached processes here: GPU groups or core shares of this machine, logs in the state dir."""

    name = "local"

    def fleet_fields(self) -> dict[str, object]:
        return {"backend": self.name}

    def layout(self, config: FleetConfig, count: int | None = None) -> list[Devices]:
        infos = {g.index: g for g in discover_gpus()} if config.gpus != "none" else {}
        available = list(infos)
        if config.gpus not in ("all", "none") and not available:
            raise ConfigError(f"--gpus {config.gpus} but no GPU is visible", hint="use --gpus none for the CPU engine")
        replicas = count or config.replicas
        if available:
            groups = gpu_groups(config.gpus, config.tp, replicas, available, config.replicas_per_gpu)
            return [Devices(gpus=g, kind=gpu_kind([infos[i] for i in g])) for g in groups]
        if config.engine != "vllm":
            raise ConfigError(
                f"engine {config.engine!r} needs a GPU and none is visible",
                hint="use --engine vllm with the CPU build (pip install 'fleetgen[cpu]')",
            )
        return [Devices(cpus=c) for c in cpu_shares(replicas or 1)]

    def resolve_model(self, config: FleetConfig, running: FleetState | None = None) -> str:
        """Resolved here, once (an embedded model is prepared now); a restart reuses the path its fleet loaded."""
        return running.model if running is not None else resolve_model(config.model)

    def default_python(self, chosen: str | None) -> str | None:
        return chosen or sys.executable

    def check_ports(self, specs: list[ReplicaSpec]) -> None:
        for spec in specs:
            check_port_free(spec.host, spec.port)

    def preflight(self, config: FleetConfig, specs: list[ReplicaSpec], python: str | None) -> None:
        """The doctor on this machine's GPUs and `python`'s engine; CPU replicas skip it (its checks are GPU ones)."""
        if not (config.doctor and specs and specs[0].on_gpu):
            return
        from fleetgen.doctor import DoctorConfig, run_doctor

        report = run_doctor(
            DoctorConfig(
                engine=config.engine,
                python=python or sys.executable,
                tp=config.tp,
                max_running_requests=config.max_running_requests,
                context_length=config.context_length,
                engine_args=list(config.engine_args),
            )
        )
        if report.failed:
            lines = "; ".join(f"{c.id}: {c.summary}" for c in report.failed)
            raise FleetError(
                f"the environment is not ready for {config.engine}: {lines}",
                hint="run `fleetgen doctor --fix DIR` and pass --fix-dir DIR, or --no-doctor to launch anyway",
            )

    def validate_commands(self, engine: Engine, specs: list[ReplicaSpec], python: str | None) -> None:
        python = python or sys.executable
        engine.validate_commands([engine.command(spec, python) for spec in specs], python)

    def exposure_warning(self, config: FleetConfig) -> str | None:
        if is_loopback(config.host):
            return None
        return (
            f"warning: binding to {config.host} without an API key: anyone who reaches it can use it "
            "(set --api-key or FLEETGEN_API_KEY, or bind to 127.0.0.1)"
        )

    async def start(self, config: FleetConfig, launch: Launch) -> StartedReplica:
        launch.log_path.write_bytes(b"")  # a fresh log: readiness reads it from the start
        python = launch.python or sys.executable
        proc = spawn(launch.engine, launch.spec, launch.log_path, python, launch.env)
        replica = describe(launch.engine, launch.spec, proc.pid, launch.log_path, python, endpoint_of(launch.spec))
        return StartedReplica(replica, exit_of(proc), LogFollower(launch.log_path))

    def alive(self, replica: ReplicaState) -> bool:
        return is_alive(replica.pid, replica.create_time, replica.boot_time)

    def usage(self, replica: ReplicaState) -> tuple[float | None, float | None]:
        if not self.alive(replica):
            return None, None
        return memory_of(replica), (gpu_memory_of(replica) if replica.gpus else None)

    def stop_replica(self, replica: ReplicaState, grace_s: float) -> int:
        return len(stop_processes([(replica.pid, replica.create_time, replica.boot_time)], grace_s=grace_s))

    def stop(self, state: FleetState, grace_s: float) -> int:
        return len(stop_processes([(r.pid, r.create_time, r.boot_time) for r in state.replicas], grace_s=grace_s))
