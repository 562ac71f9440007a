"""`fleetgen doctor`: parse flags into DoctorConfig, call run_doctor, render the report."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from fleetgen.cli._config import Binding, field_help
from fleetgen.cli._config import choices as _c
from fleetgen.cli._config import default as _d
from fleetgen.doctor.config import DoctorConfig
from fleetgen.doctor.report import DoctorReport, Status

# The checks (and what they import: the fleet, psutil, aiohttp) load when the command runs.
D = "DoctorConfig"
BINDINGS = {"doctor": Binding(D, {"engine_arg": "engine_args"})}
_STYLE = {Status.OK: "green", Status.SKIP: "dim", Status.WARN: "yellow", Status.FAIL: "bold red"}


def doctor(
    engine: Annotated[str | None, typer.Option(metavar=_c(D, "engine"), help=field_help(D, "engine"))] = _d(
        D, "engine"
    ),
    model: Annotated[str | None, typer.Option(help=field_help(D, "model"))] = _d(D, "model"),
    python: Annotated[str | None, typer.Option(help=field_help(D, "python"))] = _d(D, "python"),
    tp: Annotated[int, typer.Option(help=field_help(D, "tp"))] = _d(D, "tp"),
    mem_fraction: Annotated[float, typer.Option(help=field_help(D, "mem_fraction"))] = _d(D, "mem_fraction"),
    max_running_requests: Annotated[int | None, typer.Option(help=field_help(D, "max_running_requests"))] = _d(
        D, "max_running_requests"
    ),
    context_length: Annotated[int | None, typer.Option(help=field_help(D, "context_length"))] = _d(D, "context_length"),
    engine_arg: Annotated[
        list[str] | None, typer.Option("--engine-arg", help=field_help(D, "engine_args") + " Repeatable.")
    ] = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the report as JSON (schema: docs/doctor.md).")
    ] = False,
    fix: Annotated[
        Path | None, typer.Option("--fix", help="Write an env script and a CUDA_HOME overlay to this directory.")
    ] = None,
) -> None:
    """Diagnose the GPU/CUDA/engine environment; exit 1 if any check fails."""
    from fleetgen.config import validate
    from fleetgen.doctor import run_doctor, write_fix

    config = validate(
        DoctorConfig,
        {
            "engine": engine,
            "model": model,
            "python": python,
            "tp": tp,
            "mem_fraction": mem_fraction,
            "max_running_requests": max_running_requests,
            "context_length": context_length,
            "engine_args": engine_arg or [],
        },
        source="fleetgen doctor",
    )
    report = run_doctor(config)
    if json_out:
        typer.echo(report.model_dump_json(indent=2))
    else:
        render(report, Console(highlight=False, soft_wrap=True))
    if fix is not None:
        result = write_fix(report, fix)
        err = Console(stderr=True, highlight=False, soft_wrap=True)
        err.print(
            f"wrote {result.env_script}" + (f" and the CUDA_HOME overlay {result.overlay}" if result.overlay else "")
        )
        err.print(f"apply it with:  . {result.env_script}")
        for cmd in result.plan.commands:
            err.print(f"also run: {cmd}", markup=False, style="yellow")
    raise typer.Exit(1 if report.failed else 0)


def render(report: DoctorReport, console: Console) -> None:
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("status")
    table.add_column("check")
    table.add_column("finding", overflow="fold")
    for c in report.checks:
        table.add_row(f"[{_STYLE[c.status]}]{c.status.value}[/]", c.id, c.summary)
    console.print(table)
    for c in report.checks:
        if c.fix and c.status in (Status.WARN, Status.FAIL):
            console.print(f"[{_STYLE[c.status]}]{c.id}[/]: fix: {c.fix.summary}")
            for cmd in c.fix.commands:
                console.print(f"    run: {cmd}", markup=False)
            if c.fix.engine_args:
                console.print(f"    engine flags: {' '.join(c.fix.engine_args)}", markup=False)
    bad = [c for c in report.checks if c.fix and c.fix.overlay or c.fix and (c.fix.prepend or c.fix.env)]
    if any(c.status in (Status.WARN, Status.FAIL) for c in bad):
        console.print("write these fixes with:  fleetgen doctor --fix DIR", style="bold")


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor)
