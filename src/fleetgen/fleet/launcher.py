"""`up`: start N replicas as detached processes, wait until each is verified, record the fleet."""

from __future__ import annotations

import asyncio
import ipaddress
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import psutil

from fleetgen.errors import ConfigError, ConfigMismatchError, FleetError, PortInUseError, ReplicaStartError
from fleetgen.fleet import probe
from fleetgen.fleet.config import FleetConfig
from fleetgen.fleet.devices import cpu_shares, discover_gpus, gpu_groups, sharing_waves
from fleetgen.fleet.engines import Engine, Phase, ReplicaSpec, get_engine
from fleetgen.fleet.logtail import LogFollower
from fleetgen.fleet.process import is_alive, stop_processes
from fleetgen.fleet.state import FleetState, ReplicaState, clear_state, ensure_state_dir, read_state, write_state
from fleetgen.models import model_cache_dir, resolve_model, served_name_for

# Fields whose values legitimately differ across healthy replicas (free memory differs per GPU).
SOFT_CONFIG_FIELDS = frozenset({"cache.num_gpu_blocks", "max_total_num_tokens"})
# Differ by design where replicas share a GPU: each is given its own memory share (replicas_per_gpu).
SHARING_SOFT_FIELDS = frozenset({"mem_fraction_static", "cache.gpu_memory_utilization"})


@dataclass
class ReplicaProgress:
    """One update of a replica's start-up, for the CLI's live view."""

    index: int
    phase: Phase
    elapsed_s: float
    detail: str = ""


ProgressCallback = Callable[[ReplicaProgress], None]


def api_key_of(config: FleetConfig) -> str | None:
    if config.api_key is not None:
        return config.api_key.get_secret_value()
    return os.environ.get("FLEETGEN_API_KEY") or None


def plan_replicas(config: FleetConfig, model_path: str) -> list[ReplicaSpec]:
    """Turn the config into one spec per replica: devices, port, engine settings."""
    available = [g.index for g in discover_gpus()] if config.gpus != "none" else []
    if config.gpus not in ("all", "none") and not available:
        raise ConfigError(f"--gpus {config.gpus} but no GPU is visible", hint="use --gpus none for the CPU engine")
    if available:
        groups: list[tuple[int, ...]] = gpu_groups(
            config.gpus, config.tp, config.replicas, available, config.replicas_per_gpu
        )
        cpus: list[tuple[int, ...]] = [()] * len(groups)
    else:
        if config.engine != "vllm":
            raise ConfigError(
                f"engine {config.engine!r} needs a GPU and none is visible",
                hint="use --engine vllm with the CPU build (pip install 'fleetgen[cpu]')",
            )
        n = config.replicas or 1
        groups = [()] * n
        cpus = cpu_shares(n)
    return replica_specs(config, model_path, groups, cpus)


def replica_specs(
    config: FleetConfig, model_path: str, groups: list[tuple[int, ...]], cpus: list[tuple[int, ...]]
) -> list[ReplicaSpec]:
    """One spec per device group with the engine settings every replica shares (local and Ray fleets)."""
    served = config.served_model_name or served_name_for(config.model)
    key = api_key_of(config)
    extra_args = list(config.engine_args)
    if config.fix_dir is not None:
        from fleetgen.doctor import engine_args_for_replicas

        fix_args = engine_args_for_replicas(config.fix_dir)
        extra_args = [a for a in fix_args if a not in extra_args or not a.startswith("--")] + extra_args
    return [
        ReplicaSpec(
            index=i,
            model=model_path,
            served_model_name=served,
            host=config.host,
            port=config.port_base + i,
            gpus=groups[i],
            cpus=cpus[i],
            tp=config.tp,
            max_running_requests=config.max_running_requests,
            context_length=config.context_length,
            enforce_eager=config.enforce_eager,
            cpu_kv_cache_gb=config.cpu_kv_cache_gb,
            api_key=key,
            tool_call_parser=config.tool_call_parser,
            extra_args=tuple(extra_args),
            cache_dir=engine_cache_dir(config.engine, i),
            gpu_sharers=groups.count(groups[i]) if groups[i] else 1,
            gpu_slot=groups[:i].count(groups[i]) if groups[i] else 0,
        )
        for i in range(len(groups))
    ]


def engine_cache_dir(engine: str, index: int) -> Path:
    """Compile caches per replica slot, kept across fleets: replicas racing on one cache corrupt it."""
    return model_cache_dir().parent / "engine-cache" / f"{engine}-replica-{index}"


def check_port_free(host: str, port: int) -> None:
    """Free as the server sees it: SO_REUSEADDR, so a just-killed replica's TIME_WAIT sockets do not count."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            holder = _port_holder(port)
            raise PortInUseError(
                f"port {port} on {host} is already in use{holder} ({e.strerror})",
                hint="pass another --port-base, or stop what holds the port (`fleetgen down` for a fleet)",
            ) from None


def _port_holder(port: int) -> str:
    try:
        for c in psutil.net_connections(kind="tcp"):
            if c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN and c.pid:
                return f" by pid {c.pid} ({psutil.Process(c.pid).name()})"
    except (psutil.Error, OSError):
        pass
    return ""


def endpoint_of(spec: ReplicaSpec) -> str:
    host = "127.0.0.1" if spec.host in ("0.0.0.0", "") else ("[::1]" if spec.host == "::" else spec.host)
    return f"http://{host}:{spec.port}"


def spawn(engine: Engine, spec: ReplicaSpec, log_path: Path, python: str, extra_env: dict[str, str]) -> subprocess.Popen:
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


def preflight(config: FleetConfig, specs: list[ReplicaSpec], python: str) -> dict[str, str]:
    """The doctor's verdict on GPUs, and the environment every replica gets (the doctor's fix, then config.env)."""
    env: dict[str, str] = {}
    if config.fix_dir is not None:
        from fleetgen.doctor import env_for_replicas

        env.update(env_for_replicas(config.fix_dir))
    env.update(config.env)
    if config.doctor and specs and specs[0].on_gpu:
        from fleetgen.doctor import DoctorConfig, run_doctor

        report = run_doctor(
            DoctorConfig(
                engine=config.engine, python=python, tp=config.tp,
                max_running_requests=config.max_running_requests, context_length=config.context_length,
                engine_args=list(config.engine_args),
            )
        )
        if report.failed:
            lines = "; ".join(f"{c.id}: {c.summary}" for c in report.failed)
            raise FleetError(
                f"the environment is not ready for {config.engine}: {lines}",
                hint="run `fleetgen doctor --fix DIR` and pass --fix-dir DIR, or --no-doctor to launch anyway",
            )
    return env


def start_replica(
    engine: Engine, spec: ReplicaSpec, state_dir: Path, python: str, extra_env: dict[str, str]
) -> tuple[ReplicaState, subprocess.Popen]:
    """Spawn one replica with a fresh log and describe it; the same path serves `up` and restarts."""
    log_path = Path(state_dir) / "logs" / f"replica-{spec.index}.log"
    log_path.write_bytes(b"")
    proc = spawn(engine, spec, log_path, python, extra_env)
    replica = ReplicaState(
        index=spec.index,
        endpoint=endpoint_of(spec),
        pid=proc.pid,
        create_time=psutil.Process(proc.pid).create_time(),
        engine=engine.name,
        model=spec.model,
        served_model_name=spec.served_model_name,
        gpus=list(spec.gpus),
        cpus=list(spec.cpus),
        log_path=str(log_path),
        command=_redact(engine.command(spec, python), spec.api_key),
    )
    return replica, proc


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 and localhost; names are not resolved (a name may point anywhere)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def exposure_warning(config: FleetConfig) -> str | None:
    """The warning `up` prints when servers would listen beyond this machine with no API key."""
    if is_loopback(config.host) or api_key_of(config):
        return None
    return (
        f"warning: binding to {config.host} without an API key: anyone who reaches it can use it "
        "(set --api-key or FLEETGEN_API_KEY, or bind to 127.0.0.1)"
    )


async def up(config: FleetConfig, *, on_progress: ProgressCallback | None = None, python: str | None = None) -> FleetState:
    """Start the fleet and return its state once every replica generated and configs agree."""
    if config.ray is not None:
        from fleetgen.fleet.ray_backend import up_ray

        return await up_ray(config, on_progress=on_progress, python=python)
    warning = exposure_warning(config)
    if warning:
        print(warning, file=sys.stderr)
    state_dir = ensure_state_dir(config.state_dir)
    _refuse_running_fleet(state_dir)
    engine = get_engine(config.engine)
    model_path = resolve_model(config.model)
    specs = plan_replicas(config, model_path)
    for spec in specs:
        check_port_free(spec.host, spec.port)
    python = python or config.python or sys.executable
    extra_env = preflight(config, specs, python)
    engine.validate_commands([engine.command(spec, python) for spec in specs], python)
    state = FleetState(
        engine=engine.name,
        model=model_path,
        served_model_name=specs[0].served_model_name,
        api_key_required=bool(specs[0].api_key),
        max_running_requests=config.max_running_requests,
        python=python,
        config=config.model_dump(mode="json", exclude={"api_key"}),
        replicas=[],
    )
    waves = [specs[:1], specs[1:]] if warm_first(config, specs) else [specs]
    waves = [[w[p] for p in pos] for w in waves for pos in sharing_waves([s.gpu_slot for s in w])]
    started: list[tuple[ReplicaState, subprocess.Popen]] = []
    configs: list[dict[str, object]] = []
    try:
        for wave in waves:
            if started:
                seed_caches(specs[0], wave)
            batch = [start_replica(engine, spec, state_dir, python, extra_env) for spec in wave]
            started += batch
            state.replicas = [r for r, _ in started]
            # Written before waiting, so `down` can clean up even if `up` itself is killed.
            write_state(state_dir, state)
            configs += await asyncio.gather(
                *(wait_ready(engine, r, p, config, specs[0].api_key, on_progress) for r, p in batch)
            )
        sharing = any(s.gpu_sharers > 1 for s in specs)
        record_configs(state.replicas, configs, SOFT_CONFIG_FIELDS | SHARING_SOFT_FIELDS if sharing else SOFT_CONFIG_FIELDS)
        state.replicas.sort(key=lambda r: r.index)  # started by GPU slot, kept by index
        write_state(state_dir, state)
        return state
    except BaseException:
        stop_processes([(r.pid, r.create_time) for r, _ in started], grace_s=min(config.stop_grace_s, 10))
        clear_state(state_dir)
        raise


def _has_files(d: Path | None) -> bool:
    return d is not None and d.is_dir() and any(p.is_file() for p in d.rglob("*"))


def warm_first(config: FleetConfig, specs: list[ReplicaSpec]) -> bool:
    """On GPUs a cold start compiles once, not N times racing on JIT caches: replica 0 alone first.

    Not on CPU: there the second wave saves little (warm 79 s vs cold 96 s for one vLLM-CPU replica)
    and waiting for the first costs a whole start (2 replicas: 210 s staged vs 123 s at once).
    """
    return (
        config.warm_first and len(specs) > 1 and specs[0].on_gpu
        and not config.enforce_eager and not _has_files(specs[0].cache_dir)
    )


def seed_caches(first: ReplicaSpec, wave: list[ReplicaSpec]) -> None:
    """Copy replica 0's fresh compile caches into each empty cache of the replicas about to start."""
    if not _has_files(first.cache_dir):
        return
    for spec in wave:
        if spec.cache_dir is not None and not _has_files(spec.cache_dir):
            shutil.copytree(first.cache_dir, spec.cache_dir, dirs_exist_ok=True, symlinks=True)


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
        print(f"note: replicas differ in {line}", file=sys.stderr)


async def restart_replica(
    state_dir: Path, index: int, *, api_key: str | None = None, on_progress: ProgressCallback | None = None
) -> ReplicaState:
    """Stop what is left of replica `index` and start it again in place: same devices, same port."""
    state = read_state(state_dir)
    config = FleetConfig.model_validate({**state.config, "api_key": api_key})
    engine = get_engine(state.engine)
    old = state.replicas[index]
    stop_processes([(old.pid, old.create_time)], grace_s=min(config.stop_grace_s, 10))
    spec = plan_replicas(config, state.model)[index]
    check_port_free(spec.host, spec.port)
    python = state.python or sys.executable
    extra_env = preflight(config.model_copy(update={"doctor": False}), [spec], python)
    replica, proc = start_replica(engine, spec, state_dir, python, extra_env)
    _record_replica(state_dir, replica)
    replica.effective_config = await wait_ready(engine, replica, proc, config, spec.api_key, on_progress)
    _record_replica(state_dir, replica)
    return replica


def _record_replica(state_dir: Path, replica: ReplicaState) -> None:
    """Re-read before writing: several replicas may be restarted at once."""
    state = read_state(state_dir)
    state.replicas[replica.index] = replica
    write_state(state_dir, state)


def _redact(cmd: list[str], secret: str | None) -> list[str]:
    return [("***" if secret and a == secret else a) for a in cmd]


def _refuse_running_fleet(state_dir: Path) -> None:
    try:
        existing = read_state(state_dir)
    except FleetError:
        return
    alive = [r for r in existing.replicas if is_alive(r.pid, r.create_time)]
    if alive:
        raise FleetError(
            f"a fleet is already running from {state_dir} ({len(alive)} replica(s) alive)",
            hint="run `fleetgen down` first, or pass another --state DIR",
        )


Liveness = Callable[[], str | None]
"""Why a starting server is gone (e.g. 'the server exited with code 1'), or None while it runs."""


def exit_of(proc: subprocess.Popen) -> Liveness:
    """Liveness of a server this process spawned."""
    return lambda: None if (code := proc.poll()) is None else f"the server exited with code {code}"


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
    """Follow the log, then health, a real generation and the reported config; works for any backend."""
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
            for line in follower.new_lines():
                last_progress = time.monotonic()
                fatal = engine.fatal_of(line)
                if fatal:
                    raise fail(f"fatal log line: {line.strip()[:300]}", fatal.hint)
                new_phase = engine.phase_of(line)
                if new_phase and new_phase.order > phase.order:  # logs repeat; phases only advance
                    phase = new_phase
                    emit()
            why = gone()
            if why is not None:
                follower.new_lines()
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
                emit(f"probe: {result.text.strip()[:60]!r} in {result.latency_s:.2f}s")
                return reported
            now = time.monotonic()
            if now - t0 > config.startup_timeout_s:
                raise fail(f"not ready after {config.startup_timeout_s:.0f}s", "raise startup_timeout_s or read the log")
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
