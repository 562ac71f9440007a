"""The generate section of the config tree: what `fleetgen generate` regenerates, where, and how, in sections.

The job itself (prompts, output, servers, samples) is at the top; how each part of the run behaves is in a
section that part takes alone: `sampling` (the request body and the job's identity), `transport`, `routing`,
`sharding`, `observe`, `warmup` (sampling.py, sections.py). A section's fields may also be written flat
(`temperature: 0.3`, `warmup: false`, as job files did before there were sections): the same names the CLI's
flags have (Section.flat_name).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator

from fleetgen.config import StrictModel
from fleetgen.generate.config.sampling import SAMPLING_FIELDS, SamplingConfig
from fleetgen.generate.config.sections import (
    ObserveConfig,
    RoutingConfig,
    Section,
    ShardingConfig,
    TransportConfig,
    WarmupConfig,
)

# Part of the job's identity through what they resolve to when the job runs (generate/runner.py): the prompt file's
# sha256 and rows, the model the servers serve, the history policy the target's chat template gives, the split.
# Every other field says how, where or how fast rows are made and may change between runs of one job.
RESOLVED_FIELDS = ("prompts", "model", "history_reasoning", "tokenizer", "shard", "shards")
IDENTITY_FIELDS = SAMPLING_FIELDS + RESOLVED_FIELDS


class GenerateConfig(StrictModel):
    """A generate job: its inputs and servers at the top, a section for each part of the run."""

    SECTIONS: ClassVar[tuple[str, ...]] = ("sampling", "transport", "routing", "sharding", "observe", "warmup")

    prompts: Path = Field(description="Prompt records: JSONL or Parquet (OpenAI, SpecForge or ShareGPT rows).")
    output_dir: Path = Field(description="Output directory: results.jsonl, errors.jsonl, job.json, stats.json.")
    fleet_state: Path | None = Field(None, description="State directory of a fleet started with `fleetgen up`.")
    endpoints: list[str] = Field(
        default_factory=list, description="Base URL of a server fleetgen did not start (repeatable)."
    )
    model: str | None = Field(
        None, description="Served model name; default: the fleet's, or what the first endpoint's /v1/models lists."
    )
    api_key: SecretStr | None = Field(
        None, description="API key the servers require; also read from FLEETGEN_API_KEY. Never logged."
    )
    samples: int = Field(1, ge=1, le=1024, description="Responses to generate per prompt (sample index 0..N-1).")
    retry_errors: bool = Field(False, description="Re-attempt rows recorded in errors.jsonl by an earlier run.")
    force: bool = Field(False, description="Resume into an output directory even if the job identity differs.")
    stop_grace_s: float = Field(
        30.0, ge=0, description="On Ctrl-C/SIGTERM, how long in-flight samples may finish before they are abandoned."
    )
    commit_interval_s: float = Field(
        0.2, ge=0, description="Group commit: results gathered for up to this long share one write and fsync."
    )
    sampling: SamplingConfig = Field(
        default_factory=SamplingConfig,
        description="What each regenerated turn asks the target for: the request body every turn, probe and warm-up "
        "sends, and the job's identity (a change of max_tokens, temperature, top_p, seed, reasoning, truncation, "
        "tool_match, profiles or history_reasoning is another job).",
    )
    transport: TransportConfig = Field(
        default_factory=TransportConfig,
        description="How a request travels and is retried: the dispatcher's timeouts, attempts, backoff, stall bound "
        "and replica ejection.",
    )
    routing: RoutingConfig = Field(
        default_factory=RoutingConfig,
        description="Which replica takes a request (least outstanding, prefix affinity, hedging in the tail), "
        "and how many each takes at once.",
    )
    sharding: ShardingConfig = Field(
        default_factory=ShardingConfig,
        description="Splitting one job over client processes (`--shard i/N`, `--shards N`) and their replicas.",
    )
    observe: ObserveConfig = Field(
        default_factory=ObserveConfig, description="The job's Prometheus page (off unless metrics_port is set)."
    )
    warmup: WarmupConfig = Field(
        default_factory=WarmupConfig,
        description="One short request per sampling path on each replica before it takes the job's requests.",
    )

    @classmethod
    def flat_fields(cls) -> dict[str, tuple[str | None, str]]:
        """Flat name -> (section, field): every field by the name a flat YAML key and the CLI flag give it."""
        out: dict[str, tuple[str | None, str]] = {n: (None, n) for n in cls.model_fields if n not in cls.SECTIONS}
        for section in cls.SECTIONS:
            model: type[Section] = cls.model_fields[section].annotation  # type: ignore[assignment]
            out.update({model.flat_name(f): (section, f) for f in model.model_fields})
        return out

    @classmethod
    def nest(cls, data: Mapping[str, Any]) -> dict[str, Any]:
        """`data` with its flat keys moved into their sections (`max_attempts` -> `transport.max_attempts`)."""
        flat = cls.flat_fields()
        out: dict[str, Any] = {}
        for key, value in data.items():
            where = flat.get(key)
            if where is None or where[0] is None or (key in cls.SECTIONS and not _is_leaf(value)):
                out[key] = value  # a top-level field, a section as a mapping, or a key pydantic names as unknown
        for key, value in data.items():
            where = flat.get(key)
            if where is None or where[0] is None or (key in cls.SECTIONS and not _is_leaf(value)):
                continue
            section, field = where
            given = out.get(section) or {}
            given = given.model_dump(exclude_unset=True) if isinstance(given, BaseModel) else dict(given)
            if field in given:
                raise ValueError(f"{key} and {section}.{field} are both given: keep one")
            out[section] = {**given, field: value}
        return out

    @classmethod
    def overlay(cls, base: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
        """`base` (flat keys or sections: a YAML file, a dump) with `changes` laid over it, each into its section."""
        out = cls.nest(base)
        for key, value in cls.nest(changes).items():
            out[key] = {**out.get(key, {}), **value} if key in cls.SECTIONS else value
        return out

    @model_validator(mode="before")
    @classmethod
    def _flat_keys(cls, data: Any) -> Any:
        return cls.nest(data) if isinstance(data, Mapping) else data

    def updated(self, **changes: Any) -> GenerateConfig:
        """A validated copy with `changes` (flat names, or whole sections) laid over this config's values."""
        return type(self).model_validate(self.overlay(self.model_dump(), changes))

    @field_validator("endpoints")
    @classmethod
    def _check_endpoints(cls, v: list[str]) -> list[str]:
        out = []
        for url in v:
            url = url.strip().rstrip("/")
            if url.endswith("/v1"):
                url = url[: -len("/v1")]
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"endpoint must be an http(s) URL, got {url!r}")
            out.append(url)
        if len(set(out)) != len(out):
            raise ValueError("endpoints must be distinct")
        return out

    @model_validator(mode="after")
    def _one_source(self) -> GenerateConfig:
        if (self.fleet_state is None) == (not self.endpoints):
            raise ValueError("give exactly one of fleet_state (--fleet) or endpoints (--endpoint)")
        return self

    def declared_identity(self) -> dict[str, object]:
        """IDENTITY_FIELDS as configured, before they resolve (prompts and model left to the caller): `run` keys
        its generate stage on these, and generate's own check of job.json decides whether a resume continues."""
        out = self.sampling.identity()
        s = self.sharding
        out.update(
            history_reasoning=self.sampling.history_reasoning,
            tokenizer=self.sampling.tokenizer,
            shard=None if s.shard is None else str(s.shard),
            shards=s.shards,
        )
        return out


def _is_leaf(value: Any) -> bool:
    """A flat value, not a section: `warmup: false` is the switch, `warmup: {timeout_s: 60}` the section."""
    return not isinstance(value, (Mapping, BaseModel))
