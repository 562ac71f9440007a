"""`fleetgen plan JOB.yaml`: a job's wall time and GPU-hours from a measured throughput, and its capture storage."""

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
    prompt_tokens_per_sample: Annotated[
        float | None,
        typer.Option(
            "--prompt-tokens-per-sample",
            help="Mean prompt tokens per (prompt, sample), which a capture stores too; default: measured, else 0.",
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            help="Model directory (or embedded name) whose config.json gives the capture's shape; "
            "default: the job's capture or fleet model. Read locally, never from a hub.",
        ),
    ] = None,
    hidden_size: Annotated[
        int | None, typer.Option("--hidden-size", min=1, help="The target's hidden size (instead of its config.json).")
    ] = None,
    num_layers: Annotated[
        int | None,
        typer.Option("--num-layers", min=1, help="The target's decoder layers (instead of its config.json)."),
    ] = None,
    draft_layers: Annotated[
        int | None,
        typer.Option("--draft-layers", min=1, help="dflash: the drafter's layers; default: the job's, else 5."),
    ] = None,
) -> None:
    """Estimate the job's wall time and GPU-hours from a throughput, and the storage of capturing it.

    Wall time: rows x samples x tokens per sample / throughput. Storage: eagle3 and dflash, bf16 and fp8.
    """
    from fleetgen.run import load_job
    from fleetgen.run.capture_plan import format_storage, plan_job_storage
    from fleetgen.run.job_plan import format_plan, plan_job, read_warmup

    job = load_job(job_file)
    warm = read_warmup(from_stats) if from_stats else None
    rate = throughput if throughput is not None else (warm.tokens_per_s if warm else None)
    per_sample = tokens_per_sample if tokens_per_sample is not None else (warm.tokens_per_sample if warm else None)
    try:
        stored = plan_job_storage(
            job,
            model=model,
            hidden_size=hidden_size,
            num_layers=num_layers,
            draft_layers=draft_layers,
            tokens_per_sample=tokens_per_sample,
            prompt_tokens_per_sample=prompt_tokens_per_sample,
            warm=warm,
        )
    except ConfigError as e:
        if rate is None:
            raise ConfigError(
                "nothing to plan: no throughput (pass --throughput TOKENS_PER_S or --from-stats WARMUP/stats.json) "
                f"and no model shape for the storage ({e.message})",
                hint=e.hint,
            ) from None
        stored = e
    out = []
    if rate is not None:
        plan = plan_job(job, tokens_per_s=rate, tokens_per_sample=per_sample, gpus=gpus, warmup_gpus=warmup_gpus)
        out.append(format_plan(plan))
    else:
        out.append("wall time:           needs a measured throughput (--throughput or --from-stats)")
    if isinstance(stored, ConfigError):
        out.append(f"capture storage:     needs the model's shape: {stored.message} ({stored.hint})")
    else:
        out.append(format_storage(stored))
    typer.echo("\n".join(out))


def register(app: typer.Typer) -> None:
    app.command("plan")(cmd_plan)
