"""The storage half of `fleetgen plan`: what capturing a job's hidden states writes, per preset and dtype, known first.

A capture stores every token of each (prompt, sample): the prompt as fed and the answer. Tokens per sample
come from a warm-up's stats.json (prompt + completion per row) or the flags; the model's shape from its
config.json, read locally (never from a hub), or from --hidden-size/--num-layers.
"""

from __future__ import annotations

from dataclasses import dataclass

from fleetgen.capture import storage
from fleetgen.capture.layers import PRESETS, resolve_layers
from fleetgen.capture.shape import SHAPE_HINT, ModelShape, read_shape
from fleetgen.errors import ConfigError
from fleetgen.run.config import JobConfig
from fleetgen.run.job_plan import Warmup, job_rows

DTYPES = ("bf16", "fp8")


@dataclass(frozen=True)
class StorageRow:
    """One preset in one dtype: the layers it captures and what that writes."""

    preset: str
    layers: list[int]
    estimate: storage.StorageEstimate
    chosen: bool = False  # the job's own capture section asks for this one


@dataclass(frozen=True)
class StoragePlan:
    shape: ModelShape
    pairs: int
    tokens_per_sample: float
    basis: str  # where tokens_per_sample came from, said beside it
    rows: list[StorageRow]


def model_shape(model: str | None, *, hidden_size: int | None = None, num_layers: int | None = None) -> ModelShape:
    """The shape the flags give, else the one in `model`'s config.json (a local directory or an embedded name)."""
    if hidden_size and num_layers:
        return ModelShape(num_layers, hidden_size, "--hidden-size/--num-layers")
    if not model:
        raise ConfigError("no model to read the shape from (the job names none)", hint=SHAPE_HINT)
    read = read_shape(model)
    return ModelShape(num_layers or read.num_layers, hidden_size or read.hidden_size, read.source)


def plan_storage(
    pairs: int,
    tokens_per_sample: float,
    shape: ModelShape,
    *,
    basis: str,
    draft_layers: int = 5,
    extra: str | None = None,
    chosen: tuple[str, str] | None = None,
) -> StoragePlan:
    """eagle3 and dflash (and `extra`, the job's own layer list) in bf16 and fp8, for `pairs` captured samples.

    `chosen`: the (layers, dtype) the job's capture section asks for, marked in the table.
    """
    specs = list(PRESETS) + ([extra] if extra and extra not in PRESETS else [])
    tokens = round(pairs * tokens_per_sample)
    rows = []
    for spec in specs:
        layers = resolve_layers(spec, shape.num_layers, draft_layers)
        for dtype in DTYPES:
            est = storage.estimate(shape.hidden_size, len(layers), dtype, tokens=tokens, rows=pairs)
            label = spec if spec in PRESETS else "job's layers"
            rows.append(StorageRow(label, layers, est, chosen == (spec, dtype)))
    return StoragePlan(shape, pairs, tokens_per_sample, basis, rows)


def plan_job_storage(
    job: JobConfig,
    *,
    model: str | None = None,
    hidden_size: int | None = None,
    num_layers: int | None = None,
    draft_layers: int | None = None,
    tokens_per_sample: float | None = None,
    prompt_tokens_per_sample: float | None = None,
    warm: Warmup | None = None,
) -> StoragePlan:
    """The job's capture storage: its samples, tokens from the flags or the warm-up, the shape of its model.

    The model: `model`, else the job's capture section's, else its fleet's. Tokens per sample: the answer
    (flag, warm-up mean, else max_tokens as an upper bound) plus the prompt (flag, warm-up mean, else not
    counted, and said so). Raises ConfigError when the shape cannot be read.
    """
    cap = getattr(job, "capture", None)  # the job's capture section, where it has one
    model = model or getattr(cap, "model", None) or (job.fleet.model if job.fleet else None)
    shape = model_shape(model, hidden_size=hidden_size, num_layers=num_layers)
    answer = tokens_per_sample if tokens_per_sample is not None else (warm.tokens_per_sample if warm else None)
    if tokens_per_sample is not None:
        basis = "answer: --tokens-per-sample"
    elif answer is not None:
        basis = "answer: the warm-up's mean"
    else:
        answer, basis = float(job.generate.sampling.max_tokens), "answer = max_tokens, an upper bound"
    prompt = prompt_tokens_per_sample
    if prompt is None and warm is not None:
        prompt = warm.prompt_tokens_per_sample
    basis += "; prompt not counted: pass --prompt-tokens-per-sample" if prompt is None else "; prompt included"
    return plan_storage(
        job_rows(job) * job.generate.samples,
        answer + (prompt or 0.0),
        shape,
        basis=basis,
        draft_layers=draft_layers or getattr(cap, "draft_layers", None) or 5,
        extra=getattr(cap, "layers", None),
        chosen=(cap.layers, cap.dtype) if cap is not None else None,
    )


def format_storage(p: StoragePlan) -> str:
    """The table a person reads before a capture: per preset and dtype, bytes a token and the job's total."""
    s = p.shape
    lines = [
        f"capture storage:     {s.num_layers} layers x hidden {s.hidden_size} ({s.source})",
        f"captured tokens:     {round(p.pairs * p.tokens_per_sample):,} "
        f"({p.pairs:,} samples x {p.tokens_per_sample:,.0f} tokens, {p.basis})",
    ]
    width = max(len(r.preset) for r in p.rows)
    for r in p.rows:
        e = r.estimate
        lines.append(
            f"  {r.preset:<{width}} {e.dtype:<4} layers {','.join(map(str, r.layers)):<18} "
            f"{storage.format_per_token(e.per_token):>22} a token  total {storage.format_bytes(e.total):>11}"
            + ("  <- the job's capture" if r.chosen else "")
        )
    lines.append(
        "  (a token: layers x hidden x 2 bytes in bf16, x 1 in fp8 plus one float32 scale; its int64 id; the total "
        "adds each file's header and the Arrow dataset's 16 bytes a token)"
    )
    return "\n".join(lines)
