"""`fleetgen status / down`: a look at a fleet, and its stop.

A module apart from `up` (cli/up.py), whose twenty options `status` and `down` would otherwise build
at each start; the HTTP probes, psutil and rich load inside the command that uses them.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from fleetgen.cli._config import Binding
from fleetgen.cli._config import default as _d
from fleetgen.cli._config import field_help as _h

if TYPE_CHECKING:
    from fleetgen.fleet.jobs import JobProgress


F = "FleetConfig"
_FIELD_OF = {"state": "state_dir", "grace": "stop_grace_s"}
BINDINGS = {name: Binding(F, _FIELD_OF) for name in ("status", "down")}

StateOpt = Annotated[Path, typer.Option("--state", help=_h(F, "state_dir"))]
ApiKeyOpt = Annotated[
    str | None, typer.Option("--api-key", envvar="FLEETGEN_API_KEY", show_envvar=True, help=_h(F, "api_key"))
]


def cmd_status(
    state: StateOpt = _d(F, "state_dir"),
    api_key: ApiKeyOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
) -> None:
    """Show each replica (alive, healthy, latency, load, throughput, memory) and the jobs driving the fleet."""
    from fleetgen.fleet.state_file import read_state_json

    read_state_json(state)  # no fleet: its one-line error comes before the probes and the state models load

    import asyncio
    import json

    from rich.console import Console
    from rich.table import Table

    from fleetgen.cli._wide import print_whole
    from fleetgen.cli.capture_status import capture_status
    from fleetgen.fleet.jobs import read_jobs
    from fleetgen.fleet.status import fleet_status

    fleet, statuses = asyncio.run(fleet_status(state, api_key=api_key))
    jobs = read_jobs(state)
    capture_lines, captures = capture_status(state)
    if as_json:
        print(
            json.dumps(
                {
                    "engine": fleet.engine,
                    "model": fleet.served_model_name,
                    "replicas": [s.to_dict() for s in statuses],
                    "jobs": [{**j.model_dump(), "running": running} for j, running in jobs],
                    "captures": captures,
                },
                indent=2,
            )
        )
        return
    t = Table(title=f"fleet {fleet.served_model_name} ({fleet.engine})")
    for col in (
        "replica",
        "node",
        "endpoint",
        "pid",
        "alive",
        "healthy",
        "latency ms",
        "running",
        "waiting",
        "job limit",
        "tok/s",
        "mem MiB",
        "GPU MiB",
    ):
        t.add_column(col)
    limits = job_limits(jobs)
    frozen = {e for j, running in jobs if running for e, f in j.frozen.items() if f.now}
    for s in statuses:
        t.add_row(
            str(s.index),
            s.node or "local",
            s.endpoint,
            str(s.pid),
            "[green]yes[/]" if s.alive else "[red]no[/]",
            # /health can answer while generation is wedged: a job that found the replica frozen says so.
            "[red]frozen (job)[/]" if s.endpoint in frozen else "[green]yes[/]" if s.healthy else "[red]no[/]",
            _fmt(s.probe_latency_ms),
            _fmt(s.running),
            _fmt(s.waiting),
            _fmt(limits.get(s.endpoint)),
            _fmt(s.tokens_per_s),
            _fmt(s.memory_mib),
            _fmt(s.gpu_memory_mib),
        )
    print_whole(Console(), t)
    for job, running in jobs:
        Console(soft_wrap=True).print(job_line(job, running), highlight=False)
    for line in capture_lines:
        Console(soft_wrap=True).print(line, highlight=False)
    if not all(s.healthy and s.endpoint not in frozen for s in statuses):
        raise typer.Exit(1)


def job_limits(jobs: list[tuple[JobProgress, bool]]) -> dict[str, int]:
    """Per endpoint, the in-flight limits of the running jobs
    driving it, added up (shards of one job, or several jobs)."""
    out: dict[str, int] = {}
    for job, running in jobs:
        if running:
            for endpoint, limit in job.limits.items():
                out[endpoint] = out.get(endpoint, 0) + limit
    return out


def job_line(j: JobProgress, running: bool) -> str:
    """One line per job: what it reported last (it rewrites its file every few seconds)."""
    share = f" ({100 * j.done / j.total:.0f}%)" if j.total else ""
    line = (
        f"job pid {j.pid} -> {j.output_dir}: {j.done}/{j.total} done{share}, {j.samples_per_s:.2f} samples/s, "
        f"{j.output_tokens_per_s:.0f} tok/s, ETA {_duration(j.eta_s)}, {j.errors} errors"
    )
    if j.limits:
        line += f", in flight at most {'/'.join(str(v) for v in j.limits.values())} per replica ({j.concurrency})"
    if j.stalled:
        line += ", [yellow]re-sent after no answer:[/] " + ", ".join(f"{n} on {e}" for e, n in j.stalled.items())
    for endpoint, f in j.frozen.items():
        if f.now:
            line += (
                f", [red]{endpoint} frozen[/] for {_duration(j.updated_at - f.since)} (no work until a probe answers)"
            )
        elif f.rejoined_at is not None:
            ago = _duration(j.updated_at - f.rejoined_at)
            line += f", {endpoint} was frozen {f.count}x, rejoined {ago} before this report"
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
    typer.echo(f"stopped {n} process(es)" if n else f"no fleet running from {state}", err=True)


def register(app: typer.Typer) -> None:
    app.command("status")(cmd_status)
    app.command("down")(cmd_down)
