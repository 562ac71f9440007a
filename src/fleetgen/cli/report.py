"""`fleetgen report OUTDIR [--html]`: parse flags, call `build_report`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def cmd_report(
    outdir: Annotated[Path, typer.Argument(help="Output directory of `fleetgen generate`.")],
    html: Annotated[bool, typer.Option("--html", help="Also write report.html next to report.md.")] = False,
    dest: Annotated[Path | None, typer.Option("--dest", help="Where the report goes; default OUTDIR/report.")] = None,
    mix_report: Annotated[
        Path | None,
        typer.Option(
            "--mix-report", help="The --report directory (or summary.json) of `fleetgen mix`, for target shares."
        ),
    ] = None,
    tokenizer: Annotated[
        str | None,
        typer.Option(
            help=(
                "Model directory (or embedded name, or a hub id already in the local cache) whose tokenizer splits "
                "reasoning "
                "from answer tokens and re-encodes text; default: the fleet's model the runs recorded. No hub is asked."
            )
        ),
    ] = None,
    capture: Annotated[
        list[Path] | None,
        typer.Option(
            "--capture",
            help="A `fleetgen capture` output of these results to count (repeatable); default: those beside "
            "OUTDIR whose capture.json names it.",
        ),
    ] = None,
) -> None:
    """Write a report of a generate run: mix, lengths, finish reasons, throughput, errors, with plots."""
    from fleetgen.report import build_report

    path = build_report(outdir, html, dest=dest, mix_report=mix_report, tokenizer=tokenizer, captures=capture or None)
    typer.echo(str(path))


def register(app: typer.Typer) -> None:
    app.command("report")(cmd_report)
