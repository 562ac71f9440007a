"""`generate --shards N`: one command runs the job as N shards at once, as Ray tasks or local processes.

Each shard is the `--shard i/N` path unchanged (shard.py): its own journal in the one output
directory, so a shard started again after its process or Ray worker died resumes from that journal
— that is all a retry is. The runner only places the N shards, restarts one that died (Ray's
`max_retries` for a task, the same count here for a process), and merges their stats; a shard that
fails on purpose (the job changed, no replica answers) is not retried and is reported.
"""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import subprocess
import sys
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from fleetgen.errors import ConfigError, FleetgenError, OutputError
from fleetgen.fleet.state import read_state
from fleetgen.generate.config import GenerateConfig
from fleetgen.generate.dispatch.target import resolve_target
from fleetgen.generate.runner import generate
from fleetgen.generate.shards.outcome import ShardDone, ShardFailed, ShardOutcome
from fleetgen.logs import child_env, install_plain
from fleetgen.rows.stats_file import merge_stats

log = logging.getLogger(__name__)

Runner = Literal["ray", "process"]
# The file the driver writes into the output directory and every Ray task must see there (shared storage).
MARKER_PREFIX = ".fleetgen-shards-"


@dataclass
class ShardedRun:
    """The outcome of `run_shards`: one per shard, and their stats as one run's."""

    runner: Runner
    outcomes: list[ShardOutcome] = field(default_factory=list)

    @property
    def stats(self) -> dict[str, Any]:
        return merge_stats([o.stats for o in self.outcomes if isinstance(o, ShardDone)])

    @property
    def interrupted(self) -> bool:
        return any(isinstance(o, ShardDone) and o.stats.get("interrupted") for o in self.outcomes)


def run_shards(config: GenerateConfig) -> ShardedRun:
    """Run shards 0..N-1 of the job (config.shards) at once and wait for all; raises when any shard failed."""
    runner, address = choose_runner(config)
    configs = shard_configs(config)
    outdir = Path(configs[0].output_dir)
    try:
        outdir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"output directory {outdir}: cannot create it: {e.strerror}", hint="check the path") from None
    if runner == "ray":
        from fleetgen.generate.shards.ray_tasks import run_on_ray

        token = uuid.uuid4().hex
        marker = outdir / f"{MARKER_PREFIX}{token}"
        marker.write_text(token)
        try:
            outcomes = run_on_ray(configs, address, config.sharding.shard_retries, marker.name, token)
        finally:
            marker.unlink(missing_ok=True)
    else:
        outcomes = run_processes(configs, config.sharding.shard_retries)
    run = ShardedRun(runner, sorted(outcomes, key=lambda o: o.index))
    failed = [o for o in run.outcomes if isinstance(o, ShardFailed)]
    if failed:
        first = failed[0]
        more = f" (and {len(failed) - 1} more shard(s))" if len(failed) > 1 else ""
        raise FleetgenError(
            f"shard {first.index}/{len(configs)} failed: {first.reason}{more}",
            hint=(first.hint + "; " if first.hint else "")
            + "then run the same command again: every shard resumes from its journal",
        )
    return run


def choose_runner(config: GenerateConfig) -> tuple[Runner, str | None]:
    """Ray tasks (and the cluster's address) or local processes, by shard_runner and the fleet state's backend."""
    state = read_state(config.fleet_state) if config.fleet_state is not None else None
    on_ray = state is not None and state.backend == "ray"
    runner = config.sharding.shard_runner
    if runner == "process" or (runner == "auto" and not on_ray):
        return "process", None
    try:
        import ray  # noqa: F401
    except ImportError:
        raise ConfigError(
            "shard_runner ray: the ray package is not installed",
            hint="pip install 'fleetgen[ray]', or use --shard-runner process",
        ) from None
    return "ray", (state.ray_address if on_ray and state is not None else None) or "auto"


def shard_configs(config: GenerateConfig) -> list[GenerateConfig]:
    """Shard i/N of the job for each i, with absolute paths (the same on every node) and its share of the replicas.

    With at least N replicas shard i drives replica slice i/N with whole windows: a client's cost per
    request grows with the replicas it chooses among, so each shard must see only its own. With fewer,
    every shard drives all of them with 1/N of the window, so the replicas carry what one process would put on them.
    """
    n = config.sharding.shards or 1
    target = resolve_target(config)
    if len(target.endpoints) >= n:
        share: list[dict[str, object]] = [{"replica_slice": f"{i}/{n}"} for i in range(n)]
    elif target.auto:  # each shard's controller takes its share of what the engine reports (auto_limit.py)
        share = [{}] * n
    else:
        share = [{"concurrency": math.ceil(target.window / n)}] * n
    paths = {
        "prompts": Path(config.prompts).resolve(),
        "output_dir": Path(config.output_dir).resolve(),
        "fleet_state": Path(config.fleet_state).resolve() if config.fleet_state is not None else None,
    }
    port = config.observe.metrics_port  # a fixed metrics port: shard i serves on port + i (0: each picks a free one)
    return [
        config.updated(**paths, **share[i], shards=None, shard=f"{i}/{n}", metrics_port=port + i if port else port)
        for i in range(n)
    ]


def run_processes(configs: list[GenerateConfig], retries: int) -> list[ShardOutcome]:
    """Each shard in its own local process; one that dies by a
    signal is started again (it resumes), up to `retries` times."""
    env = {**os.environ, **child_env()}
    key = configs[0].api_key
    if key is not None:
        env["FLEETGEN_API_KEY"] = key.get_secret_value()  # through the environment: never in a file or argv
    procs: dict[int, subprocess.Popen] = {}
    stopping = threading.Event()  # a stop signal came: a shard that dies now is not started again

    def one(cfg: GenerateConfig) -> ShardOutcome:
        index = cfg.sharding.rows.index
        body = cfg.model_dump_json(exclude={"api_key"})
        for attempt in range(retries + 1):
            if stopping.is_set():  # the run was stopped before this shard (or its restart) could start
                return ShardFailed(index, "not started: the run was stopped", "run the same command again to resume")
            # A process group of its own: the terminal's Ctrl-C reaches the parent only, which forwards
            # it once (below). In the terminal's group each child got two SIGINTs per Ctrl-C, the
            # terminal's and the parent's, and the second abandons the samples in flight.
            proc = subprocess.Popen(
                [sys.executable, "-c", "from fleetgen.generate.shards.run import child_main; child_main()"],
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                process_group=0,
            )
            procs[index] = proc
            out, _ = proc.communicate(body)
            if proc.returncode >= 0:
                return _outcome(index, out, proc.returncode, f"pid {proc.pid}")
            name = signal.Signals(-proc.returncode).name
            if stopping.is_set():  # stopped on purpose (a signal during its start-up): not a death to retry
                return ShardFailed(
                    index,
                    f"stopped by {name} before it could finish cleanly",
                    "run the same command again: it resumes from its journal",
                )
            if attempt < retries:
                log.warning(
                    f"shard {cfg.sharding.shard} died ({name}); starting it again ({attempt + 1} of {retries}): "
                    "it resumes from its journal"
                )
        return ShardFailed(index, f"its process died ({name}) {retries + 1} times", "read its output above")

    def forward(signum: int, frame: object = None) -> None:
        """Each stop signal the parent gets, each shard gets once: the first stops it cleanly (in-flight
        samples finish), a second abandons them, as in one process. A hang-up stops them as SIGTERM does."""
        stopping.set()
        for p in list(procs.values()):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM if signum == signal.SIGHUP else signum)

    handled = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    on_main = threading.current_thread() is threading.main_thread()  # only there can handlers be set
    before = {sig: signal.signal(sig, forward) for sig in handled} if on_main else {}
    try:
        with ThreadPoolExecutor(len(configs)) as pool:
            futures = [pool.submit(one, cfg) for cfg in configs]
            return [f.result() for f in futures]
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def _outcome(index: int, out: str, code: int, where: str) -> ShardOutcome:
    lines = out.strip().splitlines()
    try:
        last = json.loads(lines[-1]) if lines else {}
    except json.JSONDecodeError:
        last = {}
    if "stats" in last:
        return ShardDone(index, last["stats"], where)
    if "error" in last:
        return ShardFailed(index, last["error"], last.get("hint"))
    return ShardFailed(index, f"its process exited with code {code}", "read its error above")


def child_main() -> None:
    """One shard in a process of its own: the config on stdin, its stats (or error) as the last line on stdout."""
    install_plain()  # its notes reach the parent's stderr, at the parent's level (child_env)
    config = GenerateConfig.model_validate_json(sys.stdin.read())
    try:
        stats = generate(config)
    except FleetgenError as e:
        _answer({"error": e.message, "hint": e.hint})
        sys.exit(1)
    _answer({"stats": stats.to_dict()})
    sys.exit(130 if stats.interrupted else 0)


def _answer(last: dict) -> None:
    """The child's last line on stdout, which the parent reads (_outcome)."""
    sys.stdout.write(json.dumps(last) + "\n")
    sys.stdout.flush()
