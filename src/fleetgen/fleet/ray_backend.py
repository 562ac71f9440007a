"""Ray backend: each replica is a detached Ray actor that runs the engine server on its node.

Ray places the replicas (one STRICT_PACK placement group per replica, so a TP group stays on
one node), each actor starts the server with the same Engine command line and environment a
local fleet uses, and the client verifies every replica exactly as for a local fleet
(`launcher.wait_ready`). The fleet state records each replica's node, endpoint and actor, so
`status`, `down`, `generate`, `run` and the supervisor read it like any fleet.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayError
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from fleetgen.errors import ConfigError, FleetError, PortInUseError
from fleetgen.fleet import launcher
from fleetgen.fleet.config import FleetConfig
from fleetgen.fleet.devices import claim_cores
from fleetgen.fleet.engines import ReplicaSpec, get_engine
from fleetgen.fleet.launcher import ProgressCallback
from fleetgen.fleet.logtail import LogFollower
from fleetgen.fleet.state import FleetState, ReplicaState, clear_state, ensure_state_dir, read_state, write_state

NAMESPACE = "fleetgen"
# Calls to a replica's actor are tiny; longer than this means its node is unreachable.
ACTOR_CALL_TIMEOUT_S = 30.0

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


def connect(address: str | None) -> None:
    """Join the Ray cluster at `address` ('auto', host:port) once per process."""
    if ray.is_initialized():
        return
    try:
        ray.init(address=address, namespace=NAMESPACE, log_to_driver=False, logging_level="WARNING")
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise FleetError(
            f"cannot connect to the Ray cluster at {address!r}: {e}",
            hint="start one with `ray start --head` (then `ray start --address HEAD:6379` on the other nodes)",
        ) from None


@ray.remote(max_restarts=0)
class ReplicaServer:
    """One replica's engine server on the node Ray placed this actor on."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.sentinel: subprocess.Popen | None = None
        self.ctime = 0.0
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
    ) -> dict[str, Any]:
        import psutil

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
            cache_dir=launcher.engine_cache_dir(engine.name, spec.index),
        )
        try:
            launcher.check_port_free(spec.host, spec.port)
        except PortInUseError:
            if not any_port:
                raise
            # A replacement: the dead server's port may linger in TIME_WAIT; the endpoint is reported anyway.
            spec = dataclasses.replace(spec, port=_free_port(spec.host))
        log_dir = Path(tempfile.gettempdir()) / "fleetgen-ray" / fleet_id
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"replica-{spec.index}.log"
        self.log_path.write_bytes(b"")
        python = python or sys.executable
        self.proc = launcher.spawn(engine, spec, self.log_path, python, extra_env)
        self.ctime = psutil.Process(self.proc.pid).create_time()
        self.sentinel = subprocess.Popen(
            [sys.executable, "-c", _SENTINEL, str(self.proc.pid)], stdin=subprocess.DEVNULL, start_new_session=True
        )
        return {
            "endpoint": f"http://{node_ip}:{spec.port}",
            "node": node_ip,
            "node_id": ray.get_runtime_context().get_node_id(),
            "pid": self.proc.pid,
            "create_time": self.ctime,
            "model": spec.model,
            "gpus": list(gpus),
            "cpus": list(cpus),
            "log_path": str(self.log_path),
            "command": launcher._redact(engine.command(spec, python), spec.api_key),
        }

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
        from fleetgen.fleet.status import gpu_memory_of, memory_of

        if self.proc is None or self.proc.poll() is not None:
            return None, None
        me = ReplicaState.model_construct(pid=self.proc.pid, create_time=self.ctime, gpus=[int(g) for g in ray.get_gpu_ids()])
        return memory_of(me), (gpu_memory_of(me) if me.gpus else None)

    def stop(self, grace_s: float) -> int:
        """Stop the server's process tree; the actor itself is killed by the caller."""
        from fleetgen.fleet.process import stop_processes

        stopped = stop_processes([(self.proc.pid, self.ctime)], grace_s=grace_s) if self.proc else []
        if self.sentinel is not None:
            self.sentinel.kill()
            self.sentinel.wait()
        for fd in self.core_locks:
            os.close(fd)
        self.core_locks = []
        return len(stopped)


def _free_port(host: str) -> int:
    import socket

    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class ActorLogFollower(LogFollower):
    """Follows a log that lives on the actor's node."""

    def __init__(self, actor: Any, path: str) -> None:
        super().__init__(Path(path))
        self.actor = actor

    def _read_from(self, offset: int) -> bytes:
        try:
            return ray.get(self.actor.read_log.remote(offset), timeout=ACTOR_CALL_TIMEOUT_S)
        except (RayError, GetTimeoutError):
            return b""


def actor_liveness(actor: Any) -> launcher.Liveness:
    def gone() -> str | None:
        try:
            code = ray.get(actor.poll.remote(), timeout=ACTOR_CALL_TIMEOUT_S)
        except GetTimeoutError:
            return None  # slow, not known dead: the stall timeout decides
        except RayError as e:
            return f"its Ray actor died ({type(e).__name__}; node lost?)"
        return None if code is None else f"the server exited with code {code}"

    return gone


def _use_gpus(config: FleetConfig) -> bool:
    if config.gpus not in ("all", "none"):
        raise ConfigError(
            f"--gpus {config.gpus}: device ids mean nothing across a Ray cluster",
            hint="use --gpus all (Ray assigns GPUs to each replica) or --gpus none (CPU replicas)",
        )
    on_gpu = config.gpus == "all" and ray.cluster_resources().get("GPU", 0) > 0
    if not on_gpu and config.engine != "vllm":
        raise ConfigError(
            f"engine {config.engine!r} needs GPUs and the Ray cluster has none",
            hint="use --engine vllm with the CPU build on CPU nodes",
        )
    return on_gpu


def _bundle(config: FleetConfig, on_gpu: bool) -> dict[str, float]:
    bundle = {"CPU": config.ray_num_cpus, **config.ray_resources}
    if on_gpu:
        bundle["GPU"] = config.tp
    return {k: v for k, v in bundle.items() if v > 0}


def _names(fleet_id: str, index: int) -> str:
    """Actor and placement group name of one replica; a replacement gets a fresh suffix."""
    return f"fleetgen-{fleet_id}-replica-{index}-{uuid.uuid4().hex[:6]}"


async def _launch(
    config: FleetConfig,
    spec: ReplicaSpec,
    on_gpu: bool,
    python: str | None,
    extra_env: dict[str, str],
    fleet_id: str,
    *,
    replacement: bool = False,
) -> tuple[ReplicaState, Any]:
    """Place, start and describe one replica (not yet verified)."""
    name = _names(fleet_id, spec.index)
    bundle = _bundle(config, on_gpu)
    pg = placement_group([bundle], strategy="STRICT_PACK", name=name, lifetime="detached")
    try:
        await asyncio.wait_for(pg.ready(), timeout=config.ray_schedule_timeout_s)
    except (TimeoutError, asyncio.TimeoutError):
        remove_placement_group(pg)
        raise FleetError(
            f"Ray cannot place replica {spec.index} ({bundle}) within {config.ray_schedule_timeout_s:.0f}s; "
            f"available: {ray.available_resources()}",
            hint="add nodes, free resources, or ask for fewer replicas (--replicas)",
        ) from None
    actor = ReplicaServer.options(
        name=name,
        namespace=NAMESPACE,
        lifetime="detached",
        num_cpus=config.ray_num_cpus,
        num_gpus=config.tp if on_gpu else 0,
        resources=dict(config.ray_resources),
        scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=0),
    ).remote()
    bind_all = config.host in ("0.0.0.0", "::")
    try:
        info = await actor.start.remote(
            get_engine(config.engine).name, spec, python, extra_env, fleet_id, bind_all, replacement,
            0 if on_gpu else max(1, int(config.ray_num_cpus)),
        )
    except RayError as e:
        _kill(name)
        raise FleetError(f"replica {spec.index} could not start on Ray: {e}", hint="read the actor's error above") from None
    replica = ReplicaState(
        index=spec.index,
        endpoint=info["endpoint"],
        pid=info["pid"],
        create_time=info["create_time"],
        engine=config.engine,
        model=info["model"],
        served_model_name=spec.served_model_name,
        gpus=info["gpus"],
        cpus=info["cpus"],
        log_path=info["log_path"],
        command=info["command"],
        node=info["node"],
        node_id=info["node_id"],
        actor=name,
    )
    return replica, actor


async def _verify(config: FleetConfig, replica: ReplicaState, actor: Any, api_key: str | None, on_progress) -> dict:
    engine = get_engine(config.engine)
    follower = ActorLogFollower(actor, replica.log_path)
    return await launcher.wait_ready(engine, replica, actor_liveness(actor), config, api_key, on_progress, follower=follower)


def _plan(config: FleetConfig, on_gpu: bool) -> list[ReplicaSpec]:
    if config.replicas:
        n = config.replicas
    elif on_gpu:
        n = int(ray.cluster_resources().get("GPU", 0)) // config.tp
        if n < 1:
            raise ConfigError(f"the Ray cluster has fewer GPUs than --tp {config.tp}", hint="lower --tp")
    else:
        n = 1
    # The model is resolved on each node (paths must exist there; 'smollm2' is prepared there).
    return launcher.replica_specs(config, config.model, [()] * n, [()] * n)


async def up_ray(config: FleetConfig, *, on_progress: ProgressCallback | None = None, python: str | None = None) -> FleetState:
    """Start the fleet as Ray actors and return its state once every replica is verified."""
    state_dir = ensure_state_dir(config.state_dir)
    _refuse_running_fleet(state_dir)
    connect(config.ray)
    on_gpu = _use_gpus(config)
    specs = _plan(config, on_gpu)
    python = python or config.python  # None: each actor's own interpreter
    if not launcher.api_key_of(config):
        print(
            "warning: Ray replicas listen on their node's address without an API key: anyone who reaches "
            "the node can use them (set --api-key or FLEETGEN_API_KEY)",
            file=sys.stderr,
        )
    extra_env = launcher.preflight(config.model_copy(update={"doctor": False}), specs, python or sys.executable)
    fleet_id = uuid.uuid4().hex[:8]
    state = FleetState(
        engine=config.engine,
        model=config.model,
        served_model_name=specs[0].served_model_name,
        api_key_required=bool(specs[0].api_key),
        max_running_requests=config.max_running_requests,
        python=python,
        config=config.model_dump(mode="json", exclude={"api_key"}),
        backend="ray",
        ray_address=ray.get_runtime_context().gcs_address,
        fleet_id=fleet_id,
    )
    write_state(state_dir, state)  # so `down` finds the actors even if `up` is killed while waiting
    launched: list[tuple[ReplicaState, Any]] = []
    try:
        tasks = [asyncio.ensure_future(_launch(config, s, on_gpu, python, extra_env, fleet_id)) for s in specs]
        try:
            for t in tasks:
                launched.append(await t)
                state.replicas = sorted((r for r, _ in launched), key=lambda r: r.index)
                write_state(state_dir, state)
        except BaseException:
            for t in tasks:
                t.cancel()
            # Replicas placed before the failure: record them so the cleanup below reaches them.
            for t in tasks:
                if t.done() and not t.cancelled() and t.exception() is None and t.result() not in launched:
                    launched.append(t.result())
            raise
        configs = await asyncio.gather(
            *(_verify(config, r, a, specs[0].api_key, on_progress) for r, a in launched)
        )
        launcher.record_configs([r for r, _ in launched], list(configs))
        state.model = launched[0][0].model
        state.replicas = [r for r, _ in launched]
        write_state(state_dir, state)
        return state
    except BaseException:
        for r, _ in launched:
            _stop_replica(r, grace_s=min(config.stop_grace_s, 10))
        _kill_fleet_leftovers(fleet_id)
        clear_state(state_dir)
        raise


async def restart_ray_replica(
    state_dir: Path, index: int, *, api_key: str | None = None, on_progress: ProgressCallback | None = None
) -> ReplicaState:
    """Replace replica `index` with a new actor wherever Ray finds room (its node may be gone)."""
    state = read_state(state_dir)
    connect(state.ray_address)
    config = FleetConfig.model_validate({**state.config, "api_key": api_key})
    old = state.replicas[index]
    _stop_replica(old, grace_s=min(config.stop_grace_s, 10))
    on_gpu = _use_gpus(config)
    spec = launcher.replica_specs(config, config.model, [()] * len(state.replicas), [()] * len(state.replicas))[index]
    extra_env = launcher.preflight(config.model_copy(update={"doctor": False}), [spec], state.python or sys.executable)
    replica, actor = await _launch(
        config, spec, on_gpu, state.python, extra_env, state.fleet_id or "x", replacement=True
    )
    launcher._record_replica(state_dir, replica)
    try:
        replica.effective_config = await _verify(config, replica, actor, spec.api_key, on_progress)
    except BaseException:
        _stop_replica(replica, grace_s=5)
        raise
    launcher._record_replica(state_dir, replica)
    return replica


def _actor(name: str | None) -> Any | None:
    if not name:
        return None
    try:
        return ray.get_actor(name, namespace=NAMESPACE)
    except ValueError:
        return None


def _kill(name: str) -> None:
    actor = _actor(name)
    if actor is not None:
        ray.kill(actor, no_restart=True)
    try:
        pg = ray.util.get_placement_group(name)
    except ValueError:
        return
    remove_placement_group(pg)


def _stop_replica(replica: ReplicaState, grace_s: float) -> int:
    """Stop the server through its actor (on its node), then kill the actor and free its placement group."""
    stopped = 0
    actor = _actor(replica.actor)
    if actor is not None:
        try:
            stopped = ray.get(actor.stop.remote(grace_s), timeout=grace_s + ACTOR_CALL_TIMEOUT_S)
        except (RayError, GetTimeoutError):
            pass  # the node is gone, and the server with it (the sentinel kills it when only the actor died)
    if replica.actor:
        _kill(replica.actor)
    return stopped


def _kill_fleet_leftovers(fleet_id: str) -> None:
    """Actors and placement groups of this fleet not (yet) in the state: a launch cut short."""
    prefix = f"fleetgen-{fleet_id}-"
    for info in ray.util.list_named_actors(all_namespaces=True):
        if info.get("namespace") == NAMESPACE and info.get("name", "").startswith(prefix):
            _stop_replica(ReplicaState.model_construct(actor=info["name"]), grace_s=5)
    for pg_info in ray.util.placement_group_table().values():
        if pg_info.get("name", "").startswith(prefix) and pg_info.get("state") != "REMOVED":
            _kill(pg_info["name"])


def _refuse_running_fleet(state_dir: Path) -> None:
    try:
        existing = read_state(state_dir)
    except FleetError:
        return
    from fleetgen.fleet.backend import backend_for

    if any(backend_for(existing).alive(r) for r in existing.replicas):
        raise FleetError(
            f"a fleet is already running from {state_dir}",
            hint="run `fleetgen down` first, or pass another --state DIR",
        )


class RayBackend:
    """Replicas are Ray actors; every question goes to the replica's actor on its node."""

    def __init__(self, state: FleetState) -> None:
        self.state = state
        connect(state.ray_address)

    def alive(self, replica: ReplicaState) -> bool:
        actor = _actor(replica.actor)
        return actor is not None and actor_liveness(actor)() is None

    def usage(self, replica: ReplicaState) -> tuple[float | None, float | None]:
        actor = _actor(replica.actor)
        if actor is None:
            return None, None
        try:
            return tuple(ray.get(actor.usage.remote(), timeout=ACTOR_CALL_TIMEOUT_S))
        except (RayError, GetTimeoutError):
            return None, None

    async def restart(
        self, state_dir: Path, index: int, *, api_key: str | None = None, on_progress: ProgressCallback | None = None
    ) -> ReplicaState:
        return await restart_ray_replica(state_dir, index, api_key=api_key, on_progress=on_progress)

    def stop(self, state: FleetState, grace_s: float) -> int:
        stopped = sum(_stop_replica(r, grace_s) for r in state.replicas)
        if state.fleet_id:
            _kill_fleet_leftovers(state.fleet_id)  # replacements that never made it into the state
        return stopped
