"""`fleetgen plan JOB.yaml`: wall time and GPU-hours of a job from a measured throughput."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fleetgen.errors import ConfigError


def cmd_plan(
    job_file: Annotated[Path, typer.Argument(help="Job YAML (the one `fleetgen run` takes).")],
    throughput: Annotated[
        float | None, typer.Option("--throughput", help="Measured output tokens/s of the warm-up fleet.")
    ] = None,
    from_stats: Annotated[
        Path | None,
        typer.Option("--from-stats", help="stats.json of a short warm-up run: throughput and tokens per sample."),
    ] = None,
    tokens_per_sample: Annotated[
        float | None,
        typer.Option(
            "--tokens-per-sample", help="Mean output tokens per (prompt, sample); default: measured, else max_tokens."
        ),
    ] = None,
    gpus: Annotated[
        int | None, typer.Option("--gpus", help="GPUs of the job's fleet; default: from the fleet section.")
    ] = None,
    warmup_gpus: Annotated[
        int | None, typer.Option("--warmup-gpus", help="GPUs the throughput was measured on; default: the job's.")
    ] = None,
) -> None:
    """Estimate the job's wall time and GPU-hours: rows x samples x tokens per sample / throughput."""
    from fleetgen.run import load_job
    from fleetgen.run.job_plan import format_plan, plan_job, read_warmup

    job = load_job(job_file)
    warm = read_warmup(from_stats) if from_stats else None
    rate = throughput if throughput is not None else (warm.tokens_per_s if warm else None)
    if rate is None:
        raise ConfigError(
            "no throughput to plan from", hint="pass --throughput TOKENS_PER_S or --from-stats WARMUP/stats.json"
        )
    per_sample = tokens_per_sample if tokens_per_sample is not None else (warm.tokens_per_sample if warm else None)
    plan = plan_job(job, tokens_per_s=rate, tokens_per_sample=per_sample, gpus=gpus, warmup_gpus=warmup_gpus)
    typer.echo(format_plan(plan))


def register(app: typer.Typer) -> None:
    app.command("plan")(cmd_plan)
