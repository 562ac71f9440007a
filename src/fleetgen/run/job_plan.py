"""`fleetgen plan`: a job's wall time and GPU-hours, from a measured throughput, before committing the GPUs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import orjson

from fleetgen.errors import ConfigError, InputError
from fleetgen.run.config import JobConfig


@dataclass(frozen=True)
class Plan:
    """What the job asks of the fleet and how long the fleet takes, at the measured rate scaled to its GPUs."""

    rows: int
    samples: int
    tokens_per_sample: float
    tokens_assumed: bool  # True when tokens_per_sample is the max_tokens upper bound, not a measurement
    gpus: int
    tokens_per_s: float  # the job's whole fleet

    @property
    def pairs(self) -> int:
        return self.rows * self.samples

    @property
    def output_tokens(self) -> float:
        return self.pairs * self.tokens_per_sample

    @property
    def wall_s(self) -> float:
        return self.output_tokens / self.tokens_per_s

    @property
    def gpu_hours(self) -> float:
        return self.wall_s / 3600 * self.gpus


@dataclass(frozen=True)
class Warmup:
    """What a short measured run says: fleet output tokens/s, and output tokens per (prompt, sample)."""

    tokens_per_s: float
    tokens_per_sample: float | None
    prompt_tokens_per_sample: float | None = None  # prompt tokens a row counted (what a capture stores besides)


def read_warmup(stats_json: Path) -> Warmup:
    """The throughput and mean output tokens per sample of a finished warm-up run, from its stats.json."""
    try:
        s = orjson.loads(Path(stats_json).read_bytes())
        rate = float(s["output_tokens_per_s"])
        ok = int(s["rows"]["ok"])
        tokens = int(s["tokens"]["completion"])
    except FileNotFoundError:
        raise InputError(
            f"no such stats file: {stats_json}", hint="point at the stats.json of a finished generate run"
        ) from None
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        raise InputError(f"{stats_json} is not a generate stats.json: {e}") from None
    if rate <= 0:
        raise InputError(f"{stats_json} records no output tokens/s", hint="run the warm-up until some rows complete")
    prompt = (s.get("tokens") or {}).get("prompt")
    return Warmup(rate, tokens / ok if ok else None, int(prompt) / ok if ok and prompt is not None else None)


def count_rows(path: Path) -> int:
    """Rows of a prompt file: non-empty JSONL lines (streamed), or the Parquet row count."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"prompt file not found: {path}")
    if path.suffix.lower() in (".parquet", ".pq"):
        import pyarrow.parquet as pq

        return pq.ParquetFile(path).metadata.num_rows
    n = 0
    with open(path, "rb") as f:
        for line in f:
            n += bool(line.strip())
    return n


def job_rows(job: JobConfig) -> int:
    """Prompts of the job: its prompt file's rows, else the mix's total."""
    gen = job.generate
    return count_rows(gen.prompts) if gen.prompts is not None else job.mix.total  # type: ignore[union-attr]


def job_gpus(job: JobConfig) -> int | None:
    """GPUs the job's fleet occupies, when its config says (replicas x tp, or an explicit GPU list)."""
    fleet = job.fleet
    if fleet is None:
        return None
    if fleet.replicas is not None:
        return fleet.replicas * fleet.tp
    if fleet.gpus not in ("all", "none"):
        return len([g for g in fleet.gpus.split(",") if g.strip()])
    return None


def plan_job(
    job: JobConfig,
    *,
    tokens_per_s: float,
    tokens_per_sample: float | None = None,
    gpus: int | None = None,
    warmup_gpus: int | None = None,
) -> Plan:
    """The job's plan; `tokens_per_s` was measured on `warmup_gpus` GPUs (default: the job's) and scales linearly."""
    if tokens_per_s <= 0:
        raise ConfigError("the measured throughput must be positive")
    gpus = gpus or job_gpus(job)
    if not gpus:
        raise ConfigError(
            "cannot tell how many GPUs the job uses (gpus: all, or external endpoints)", hint="pass --gpus N"
        )
    gen = job.generate
    rows = job_rows(job)
    assumed = tokens_per_sample is None
    per_sample = tokens_per_sample if tokens_per_sample is not None else float(gen.sampling.max_tokens)
    return Plan(
        rows=rows,
        samples=gen.samples,
        tokens_per_sample=per_sample,
        tokens_assumed=assumed,
        gpus=gpus,
        tokens_per_s=tokens_per_s * gpus / (warmup_gpus or gpus),
    )


def format_plan(p: Plan) -> str:
    """A few lines a person reads before launching."""
    hours = p.wall_s / 3600
    basis = "assumed = max_tokens, an upper bound: measure it with --from-stats" if p.tokens_assumed else "per sample"
    return "\n".join(
        [
            f"rows x samples:      {p.rows:,} x {p.samples} = {p.pairs:,}",
            f"output tokens:       {p.output_tokens:,.0f} ({p.tokens_per_sample:,.0f} {basis})",
            f"fleet throughput:    {p.tokens_per_s:,.0f} output tokens/s on {p.gpus} GPUs "
            f"({p.tokens_per_s / p.gpus:,.0f} per GPU)",
            f"wall time:           {hours:,.1f} h ({hours / 24:,.2f} days)",
            f"GPU-hours:           {p.gpu_hours:,.0f}",
        ]
    )
