"""The mix recipe: sources, domain quotas and filters, loaded from YAML by `fleetgen mix`."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from fleetgen.config import StrictModel, load_yaml
from fleetgen.mix.domains import DOMAINS


class SourceSpec(StrictModel):
    name: str = Field(description="Short unique name of the source; prefixes prompt ids and labels the report.")
    adapter: str = Field(description="Adapter that reads the dataset's schema (see `fleetgen mix --list-adapters`).")
    path: str = Field(
        description="Hugging Face dataset repo id (owner/name), or a local .jsonl/.json/.parquet file or a folder of "
        "them."
    )
    config: str | None = Field(None, description="Dataset config (subset) on the Hub, e.g. '0625'.")
    split: str = Field("train", description="Dataset split to read.")
    license: str | None = Field(
        None, description="License recorded in each prompt's meta; overrides the adapter's known license."
    )
    domain: str | None = Field(
        None, description="Force every prompt of this source into one domain instead of labels and heuristics."
    )
    max_rows: int | None = Field(None, ge=1, description="Read at most this many rows of the source (in file order).")
    weight: float = Field(
        1.0, gt=0, description="Sampling weight of this source's rows within a domain (1 = uniform over rows)."
    )
    max_per_original_question: int | None = Field(
        None,
        ge=1,
        description="Keep at most this many prompts derived from one original question (MetaMathQA's augmentations).",
    )

    @field_validator("domain")
    @classmethod
    def _known_domain(cls, v: str | None) -> str | None:
        if v is not None and v not in DOMAINS:
            raise ValueError(f"unknown domain {v!r}; known: {', '.join(DOMAINS)}")
        return v


class QuotaSpec(StrictModel):
    domain: dict[str, float] = Field(
        description="Share of the output per domain; shares sum to 1. Domains left out get no prompts."
    )

    @field_validator("domain")
    @classmethod
    def _check_shares(cls, v: dict[str, float]) -> dict[str, float]:
        unknown = sorted(set(v) - set(DOMAINS))
        if unknown:
            raise ValueError(f"unknown domain(s) {', '.join(unknown)}; known: {', '.join(DOMAINS)}")
        if any(s < 0 for s in v.values()):
            raise ValueError("domain shares must be >= 0")
        total = sum(v.values())
        if not math.isclose(total, 1.0, abs_tol=1e-6):
            raise ValueError(f"domain shares must sum to 1, they sum to {total:.6g}")
        return v


class FilterSpec(StrictModel):
    max_prompt_tokens: int | None = Field(
        None, ge=1, description="Drop prompts longer than this many tokens (estimated unless `tokenizer` is set)."
    )
    languages: list[str] | None = Field(
        None, description="Keep only prompts detected in these languages (ISO 639-1 codes, e.g. en, zh)."
    )
    keep_undetermined_language: bool = Field(
        True, description="Keep prompts whose language cannot be told (code or formulas only) when `languages` is set."
    )
    drop_near_duplicates: float | None = Field(
        0.85,
        gt=0,
        le=1,
        description="Jaccard threshold of MinHash LSH near-duplicate removal across all sources; null disables it.",
    )
    minhash_permutations: int = Field(64, ge=16, le=512, description="MinHash permutations (signature length).")
    exclude_noncommercial: bool = Field(
        False, description="Drop prompts whose recorded license forbids commercial use (e.g. WebInstructSub socratic)."
    )
    exclude_unknown_license: bool = Field(
        False,
        description=(
            "Drop prompts whose license is unknown or not known to allow commercial use (a local file without "
            "`sources[].license`, a dataset card without one); `fleetgen mix --exclude-unknown-license` sets it."
        ),
    )
    require_license: list[str] | None = Field(
        None,
        description="Keep only prompts whose recorded license is one of these (Hugging Face ids, e.g. apache-2.0, "
        "mit).",
    )
    tokenizer: str | None = Field(
        None, description="Hugging Face tokenizer path for exact token counts (needs transformers); default: estimate."
    )

    @field_validator("require_license")
    @classmethod
    def _lower(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and not v:
            raise ValueError(
                "require_license is an empty list: it would drop every prompt; list licenses or leave it out"
            )
        return None if v is None else [x.strip().lower() for x in v]


class MixRecipe(StrictModel):
    total: int = Field(
        ge=1, description="Number of prompts to write (rows), or of prompt tokens with quota_unit=tokens."
    )
    seed: int = Field(0, description="Seed of every random choice; the same recipe and seed give the same file.")
    quota_unit: Literal["rows", "tokens"] = Field(
        "rows", description="Whether `total` and the quotas count prompts or prompt tokens."
    )
    on_shortfall: Literal["redistribute", "shrink", "error"] = Field(
        "redistribute",
        description=(
            "When a domain has fewer prompts than its share: give the missing part to domains with spare prompts "
            "in proportion to their shares (redistribute), write fewer prompts (shrink), or stop (error)."
        ),
    )
    sources: list[SourceSpec] = Field(min_length=1, description="Datasets to draw prompts from, read in this order.")
    quotas: QuotaSpec = Field(description="Target shares of the output.")
    filters: FilterSpec = Field(default_factory=FilterSpec, description="Filters applied before dedup and quotas.")

    @model_validator(mode="after")
    def _unique_names(self) -> MixRecipe:
        seen: set[str] = set()
        for s in self.sources:
            if s.name in seen:
                raise ValueError(f"source name {s.name!r} is used twice; names must be unique")
            seen.add(s.name)
        return self


def load_recipe(path: str | Path) -> MixRecipe:
    """Read a recipe YAML; errors name the file and field. Relative local paths resolve against the file."""
    p = Path(path)
    recipe = load_yaml(p, MixRecipe)
    base = p.resolve().parent
    for s in recipe.sources:
        candidate = Path(s.path).expanduser()
        if not candidate.is_absolute() and (base / candidate).exists():
            s.path = str(base / candidate)
    return recipe
