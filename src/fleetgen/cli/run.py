"""`fleetgen run JOB.yaml`: the whole pipeline from one config."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape

from fleetgen.cli._config import Binding
from fleetgen.cli._config import field_help as _h
from fleetgen.config import validate

if TYPE_CHECKING:
    from fleetgen.run import RunEvent

console = Console(stderr=True, soft_wrap=True)

# The metrics flags set generate.metrics_* of the job file, and only when given.
BINDINGS = {
    "run": Binding("GenerateConfig", overrides=frozenset({"metrics_port", "metrics_host"})),
}

_STYLE = {"start": "bold", "done": "green", "skip": "dim", "invalidated": "yellow", "info": ""}


def cmd_run(
    job_file: Annotated[Path, typer.Argument(help="Job YAML: doctor, fleet, mix, generate, export, report sections.")],
    resume: Annotated[
        bool, typer.Option("--resume", help="Continue the run in the job's workdir; finished stages are skipped.")
    ] = False,
    keep_fleet: Annotated[bool, typer.Option("--keep-fleet", help="Leave the fleet running after generate.")] = False,
    metrics_port: Annotated[int | None, typer.Option(help=_h("GenerateConfig", "metrics_port"))] = None,
    metrics_host: Annotated[str | None, typer.Option(help=_h("GenerateConfig", "metrics_host"))] = None,
    metrics_allow_remote: Annotated[
        bool, typer.Option("--metrics-allow-remote", help=_h("GenerateConfig", "metrics_allow_remote"))
    ] = False,
) -> None:
    """Run doctor -> mix -> up -> generate -> down -> export -> report; resumable at every stage."""
    from fleetgen.run import load_job, run_job
    from fleetgen.run.config import GenerateSection

    job = load_job(job_file)
    # The flags override generate.metrics_* of the job file (validated again there).
    watch = {
        "metrics_port": metrics_port,
        "metrics_host": metrics_host,
        "metrics_allow_remote": metrics_allow_remote or None,
    }
    watch = {k: v for k, v in watch.items() if v is not None}
    if watch:
        observe = {**job.generate.observe.model_dump(), **watch}
        job.generate = validate(
            GenerateSection, {**job.generate.model_dump(), "observe": observe}, source=f"{job_file} and flags"
        )

    def on_event(e: RunEvent) -> None:
        style = _STYLE.get(e.kind, "")
        text = escape(f"[{e.stage}] {e.kind}{': ' + e.detail if e.detail else ''}")
        console.print(f"[{style}]{text}[/]" if style else text, highlight=False)

    last = [0.0]

    def on_progress(stats) -> None:
        now = time.monotonic()
        if now - last[0] >= 10 or stats.done >= stats.total:
            last[0] = now
            console.print(
                escape(f"[generate] {stats.done}/{stats.total} done, {stats.output_tokens_per_s:.0f} tok/s"),
                highlight=False,
            )

    summary = run_job(job, resume=resume, keep_fleet=keep_fleet, on_event=on_event, on_progress=on_progress)
    if summary.restarts:
        console.print(f"replica restarts: {summary.restarts}")
    # The last lines: where the job's work is (nothing after them).
    console.print(f"[bold green]done[/] in {summary.workdir}")
    if summary.export:
        console.print("dataset: " + ", ".join(str(p) for p in summary.export.values()))
    if summary.capture:
        console.print(f"hidden states: {summary.capture}")
    if summary.report:
        console.print(f"report:  {summary.report}")


def register(app: typer.Typer) -> None:
    app.command("run")(cmd_run)
