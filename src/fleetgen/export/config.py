"""The export section of the config tree: which results become which training file, and what is filtered."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from fleetgen.config import StrictModel

Format = Literal["specforge", "sharegpt", "openai", "tokens", "speculators"]
# Formats of token ids and a loss mask: they need the target's tokenizer.
TOKEN_FORMATS = ("tokens", "speculators")
Reasoning = Literal["train", "context", "drop"]


class ExportConfig(StrictModel):
    results_dir: Path = Field(description="Output directory of `fleetgen generate` (results*.jsonl inside).")
    output: Path = Field(
        description="A file (*.jsonl, or *.parquet for tokens) or a directory (train.* and eval.* inside). "
        "With an eval split, FILE.ext becomes FILE.train.ext and FILE.eval.ext."
    )
    format: Format = Field(
        "specforge",
        description="specforge: {id, conversations, tools}; sharegpt: from/value turns; openai: {id, messages, tools}; "
        "tokens: Parquet of input_ids + loss_mask (the sampled token ids; re-tokenized text where a row has none); "
        "speculators: vllm-project/speculators' JSONL rows, one per generation.",
    )
    tokenizer: str | None = Field(
        None,
        description="Tokenizer with the target's chat template (path, hub id or 'smollm2'); "
        "needed for tokens and speculators; default: the fleet's model the runs recorded, from local files only.",
    )
    reasoning: Reasoning = Field(
        "train",
        description="train: keep reasoning_content and supervise it; context: keep it but mask it out (tokens); "
        "drop: remove it from the rows.",
    )
    finish_reasons: list[str] = Field(
        default_factory=lambda: ["stop", "tool_calls"],
        description="A row is kept only if every regenerated turn ended with one of these (a turn ending in a "
        "tool call is finished, not cut).",
    )
    min_supervised_tokens: int = Field(
        0,
        ge=0,
        description="Drop rows with fewer supervised tokens (a drafter with block size B needs more than B); "
        "tokens: masked tokens, other formats: the completion tokens the server counted.",
    )
    drop_think_markers: bool = Field(
        True, description="Drop rows whose answer text still holds <think> or </think> (a reasoning parser miss)."
    )
    max_length: int | None = Field(
        None, ge=16, description="tokens: drop rows longer than this many tokens instead of truncating them."
    )
    eval_fraction: float = Field(
        0.0, ge=0.0, lt=1.0, description="Share of prompt ids held out for eval, chosen by a stable hash of the id."
    )
    split_salt: str = Field("fleetgen", description="Salt of the eval-split hash; change it to draw another split.")
    overwrite: bool = Field(False, description="Replace output files that already exist.")
    require_token_ids: bool = Field(
        False,
        description="tokens/speculators: fail (writing nothing) if any row would be re-tokenized from text instead of "
        "built from the server's ids, naming those turns (id, sample, turn, reason).",
    )

    @model_validator(mode="after")
    def _check(self) -> ExportConfig:
        suffix = self.output.suffix.lower()
        if self.format == "tokens" and suffix not in ("", ".parquet"):
            raise ValueError("format tokens writes Parquet: name the output *.parquet or a directory")
        if self.format != "tokens" and suffix not in ("", ".jsonl"):
            raise ValueError(f"format {self.format} writes JSONL: name the output *.jsonl or a directory")
        if self.require_token_ids and self.format not in TOKEN_FORMATS:
            raise ValueError(
                f"require_token_ids (--require-token-ids) is for the tokens and speculators formats, not {self.format}"
            )
        return self

    @property
    def extension(self) -> str:
        return ".parquet" if self.format == "tokens" else ".jsonl"

    def output_paths(self) -> dict[str, Path]:
        """Where each split goes: {"train": path} or {"train": path, "eval": path}."""
        split = self.eval_fraction > 0
        if self.output.suffix:
            if not split:
                return {"train": self.output}
            stem, ext = self.output.with_suffix(""), self.output.suffix
            return {"train": Path(f"{stem}.train{ext}"), "eval": Path(f"{stem}.eval{ext}")}
        paths = {"train": self.output / f"train{self.extension}"}
        if split:
            paths["eval"] = self.output / f"eval{self.extension}"
        return paths
