"""`fleetgen up / status / down`.

Only the config model is imported at module level (the flags' help is its field descriptions);
the launcher, the HTTP probes, psutil and rich's live view load inside the command that uses them,
so `fleetgen --help`, `status` and `down` start fast.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from fleetgen.cli._config import Binding
from fleetgen.cli._config import choices as _c
from fleetgen.cli._config import default as _d
from fleetgen.config import field_help as _h
from fleetgen.fleet import FleetConfig

if TYPE_CHECKING:
    from rich.table import Table

    from fleetgen.fleet.jobs import JobProgress


def _console():
    from rich.console import Console

    return Console(stderr=True, soft_wrap=True)

F = FleetConfig
_FIELD_OF = {"startup_timeout": "startup_timeout_s", "state": "state_dir", "grace": "stop_grace_s"}
BINDINGS = {name: Binding(FleetConfig, _FIELD_OF) for name in ("up", "status", "down")}

StateOpt = Annotated[Path, typer.Option("--state", help=_h(FleetConfig, "state_dir"))]
ApiKeyOpt = Annotated[
    Optional[str], typer.Option("--api-key", envvar="FLEETGEN_API_KEY", show_envvar=True, help=_h(FleetConfig, "api_key"))
]


def cmd_up(
    ctx: typer.Context,
    engine: Annotated[str, typer.Option(metavar=_c(F, "engine"), help=_h(F, "engine"))] = _d(F, "engine"),
    model: Annotated[str, typer.Option(help=_h(F, "model"))] = _d(F, "model"),
    replicas: Annotated[Optional[int], typer.Option(help=_h(F, "replicas"))] = _d(F, "replicas"),
    gpus: Annotated[str, typer.Option(help=_h(F, "gpus"))] = _d(F, "gpus"),
    tp: Annotated[int, typer.Option(help=_h(F, "tp"))] = _d(F, "tp"),
    replicas_per_gpu: Annotated[int, typer.Option(help=_h(F, "replicas_per_gpu"))] = _d(F, "replicas_per_gpu"),
    host: Annotated[str, typer.Option(help=_h(F, "host"))] = _d(F, "host"),
    port_base: Annotated[int, typer.Option(help=_h(F, "port_base"))] = _d(F, "port_base"),
    max_running_requests: Annotated[
        Optional[int], typer.Option(help=_h(F, "max_running_requests"))
    ] = _d(F, "max_running_requests"),
    context_length: Annotated[Optional[int], typer.Option(help=_h(F, "context_length"))] = _d(F, "context_length"),
    enforce_eager: Annotated[bool, typer.Option(help=_h(F, "enforce_eager"))] = _d(F, "enforce_eager"),
    tool_call_parser: Annotated[Optional[str], typer.Option(help=_h(F, "tool_call_parser"))] = _d(F, "tool_call_parser"),
    python: Annotated[Optional[str], typer.Option(help=_h(F, "python"))] = _d(F, "python"),
    doctor: Annotated[bool, typer.Option(help=_h(F, "doctor"))] = _d(F, "doctor"),
    fix_dir: Annotated[Optional[Path], typer.Option(help=_h(F, "fix_dir"))] = _d(F, "fix_dir"),
    startup_timeout: Annotated[float, typer.Option(help=_h(F, "startup_timeout_s"))] = _d(F, "startup_timeout_s"),
    ray: Annotated[Optional[str], typer.Option("--ray", metavar="ADDRESS|auto", help=_h(F, "ray"))] = _d(F, "ray"),
    state: StateOpt = _d(F, "state_dir"),
    api_key: ApiKeyOpt = _d(F, "api_key"),
    config: Annotated[Optional[Path], typer.Option(help="YAML file with a fleet config; flags given override it.")] = None,
) -> None:
    """Start a data-parallel fleet and return once every replica is verified. Engine flags go after `--`."""
    import asyncio

    from fleetgen.cli._config import merge_flags
    from fleetgen.config import validate

    console = _console()
    flags = {
        "engine": engine, "model": model, "replicas": replicas, "gpus": gpus, "tp": tp, "replicas_per_gpu": replicas_per_gpu,
        "host": host,
        "port_base": port_base, "max_running_requests": max_running_requests, "context_length": context_length,
        "enforce_eager": enforce_eager, "tool_call_parser": tool_call_parser, "python": python, "doctor": doctor, "fix_dir": fix_dir,
        "startup_timeout": startup_timeout, "state": state, "api_key": api_key, "ray": ray,
    }
    base = merge_flags(ctx, flags, config, _FIELD_OF)
    if ctx.args:
        base["engine_args"] = list(base.get("engine_args") or []) + list(ctx.args)
    cfg = validate(FleetConfig, base, source=f"{config} and flags" if config else "flags")
    fleet = asyncio.run(_up_with_live_view(cfg, console))
    for r in fleet.replicas:
        where = f"  node {r.node}  actor {r.actor}" if r.actor else ""
        console.print(f"replica {r.index}: {r.endpoint}  pid {r.pid}{where}  log {r.log_path}")
    console.print(f"[green]fleet ready[/]: {len(fleet.replicas)} replica(s) of {fleet.served_model_name}; state in {cfg.state_dir}")
    from fleetgen.generate.turns.paths import fleet_paths

    key = cfg.api_key.get_secret_value() if cfg.api_key else None
    console.print(f"generation path: {asyncio.run(fleet_paths(fleet.endpoints, fleet.served_model_name, key))}")


async def _up_with_live_view(cfg: FleetConfig, console):
    from rich.live import Live
    from rich.table import Table

    from fleetgen.fleet import ReplicaProgress, up
    from fleetgen.fleet.engines import Phase

    rows: dict[int, ReplicaProgress] = {}
    if not sys.stderr.isatty():
        last: dict[int, Phase] = {}

        def on_progress(p: ReplicaProgress) -> None:
            if last.get(p.index) != p.phase:
                last[p.index] = p.phase
                console.print(f"replica {p.index}: {p.phase.value} ({p.elapsed_s:.0f}s) {p.detail}")

        return await up(cfg, on_progress=on_progress)

    def render() -> Table:
        t = Table(title="starting fleet", expand=False)
        for col in ("replica", "phase", "elapsed", "detail"):
            t.add_column(col)
        for i in sorted(rows):
            p = rows[i]
            color = {"ready": "green", "failed": "red"}.get(p.phase.value, "yellow")
            t.add_row(str(i), f"[{color}]{p.phase.value}[/]", f"{p.elapsed_s:.0f}s", p.detail)
        return t

    with Live(render(), console=console, refresh_per_second=2) as live:

        def on_progress(p: ReplicaProgress) -> None:
            rows[p.index] = p
            live.update(render())

        return await up(cfg, on_progress=on_progress)


def cmd_status(
    state: StateOpt = _d(F, "state_dir"),
    api_key: ApiKeyOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
) -> None:
    """Show each replica (alive, healthy, latency, load, throughput, memory) and the jobs driving the fleet."""
    import asyncio
    import json

    from rich.console import Console
    from rich.table import Table

    from fleetgen.cli._wide import print_whole
    from fleetgen.fleet.jobs import read_jobs
    from fleetgen.fleet.status import fleet_status

    fleet, statuses = asyncio.run(fleet_status(state, api_key=api_key))
    jobs = read_jobs(state)
    if as_json:
        print(json.dumps({
            "engine": fleet.engine, "model": fleet.served_model_name, "replicas": [s.to_dict() for s in statuses],
            "jobs": [{**j.model_dump(), "running": running} for j, running in jobs],
        }, indent=2))
        return
    t = Table(title=f"fleet {fleet.served_model_name} ({fleet.engine})")
    for col in ("replica", "node", "endpoint", "pid", "alive", "healthy", "latency ms", "running", "waiting", "job limit",
                "tok/s", "mem MiB", "GPU MiB"):
        t.add_column(col)
    limits = job_limits(jobs)
    for s in statuses:
        t.add_row(
            str(s.index), s.node or "local", s.endpoint, str(s.pid),
            "[green]yes[/]" if s.alive else "[red]no[/]",
            "[green]yes[/]" if s.healthy else "[red]no[/]",
            _fmt(s.probe_latency_ms), _fmt(s.running), _fmt(s.waiting), _fmt(limits.get(s.endpoint)),
            _fmt(s.tokens_per_s), _fmt(s.memory_mib), _fmt(s.gpu_memory_mib),
        )
    print_whole(Console(), t)
    for job, running in jobs:
        Console(soft_wrap=True).print(_job_line(job, running), highlight=False)
    if not all(s.healthy for s in statuses):
        raise typer.Exit(1)


def job_limits(jobs: list[tuple[JobProgress, bool]]) -> dict[str, int]:
    """Per endpoint, the in-flight limits of the running jobs driving it, added up (shards of one job, or several jobs)."""
    out: dict[str, int] = {}
    for job, running in jobs:
        if running:
            for endpoint, limit in job.limits.items():
                out[endpoint] = out.get(endpoint, 0) + limit
    return out


def _job_line(j: JobProgress, running: bool) -> str:
    """One line per job: what it reported last (it rewrites its file every few seconds)."""
    share = f" ({100 * j.done / j.total:.0f}%)" if j.total else ""
    line = (f"job pid {j.pid} -> {j.output_dir}: {j.done}/{j.total} done{share}, {j.samples_per_s:.2f} samples/s, "
            f"{j.output_tokens_per_s:.0f} tok/s, ETA {_duration(j.eta_s)}, {j.errors} errors")
    if j.limits:
        line += f", in flight at most {'/'.join(str(v) for v in j.limits.values())} per replica ({j.concurrency})"
    if j.metrics_url:
        line += f", metrics {j.metrics_url}"
    if not running:
        ago = time.time() - j.updated_at
        line = f"[red]not running[/] (last report {_duration(ago)} ago): " + line
    return line


def _duration(s: float | None) -> str:
    if s is None:
        return "-"
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}" if float(v).is_integer() or abs(v) >= 10 else f"{v:.1f}"


def cmd_down(
    state: StateOpt = _d(F, "state_dir"),
    grace: Annotated[float, typer.Option(help=_h(F, "stop_grace_s"))] = _d(F, "stop_grace_s"),
) -> None:
    """Stop the fleet (SIGTERM, then SIGKILL after the grace period); safe to run twice."""
    from fleetgen.fleet.stop import down

    n = down(state, grace_s=grace)
    _console().print(f"stopped {n} process(es)" if n else f"no fleet running from {state}")


def register(app: typer.Typer) -> None:
    app.command("up", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(cmd_up)
    app.command("status")(cmd_status)
    app.command("down")(cmd_down)
