"""The capture section of the config tree: which results, which layers and dtype, which backend, where to write."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from fleetgen.config import StrictModel

Backend = Literal["vllm", "transformers"]


class CaptureConfig(StrictModel):
    results_dir: Path = Field(description="Output directory of `fleetgen generate` (results*.jsonl inside).")
    output: Path = Field(
        description="Capture directory: the Arrow dataset, hidden_states/hs_{i}.safetensors and the journal."
    )
    layers: str = Field(
        "eagle3",
        description="eagle3 ([2, N//2, N-3, N], speculators' default), dflash (--draft-layers layers evenly spaced "
        "from 1 to N-3, each layer's output, and N), or indices like 2,15,27,30 (0 = embeddings, k = output of "
        "decoder layer k-1, N = last layer before the final norm).",
    )
    draft_layers: int = Field(5, ge=1, le=64, description="dflash: the drafter's number of layers.")
    dtype: Literal["bf16", "fp8"] = Field(
        "bf16", description="bf16, or fp8 (float8_e4m3fn with one float32 scale per token, as hs-connectors stores it)."
    )
    backend: Backend = Field(
        "vllm",
        description="vllm: a capture fleet's extract_hidden_states (--fleet or --endpoint); "
        "transformers: a forward of --model in this process.",
    )
    fleet: Path | None = Field(None, description="State directory of a capture fleet (`fleetgen up --capture-layers`).")
    endpoints: list[str] = Field(
        default_factory=list,
        description="Capture servers started elsewhere (URL, repeatable); their staging "
        "directory must be readable here.",
    )
    server_layers: str | None = Field(
        None, description="--endpoint: the layers the servers capture, if more than --layers (a list)."
    )
    model: str | None = Field(
        None,
        description="The target model (path or 'smollm2'): its tokenizer, layer count and, for transformers, "
        "its weights; default: the fleet's model.",
    )
    device: str = Field("cpu", description="transformers: the device of the forward (cpu, cuda, cuda:1).")
    batch_tokens: int = Field(8192, ge=1, description="transformers: padded tokens per forward.")
    concurrency: int = Field(8, ge=1, description="vllm: rows in flight per replica.")
    max_length: int | None = Field(None, ge=16, description="Skip (as failed) rows longer than this many tokens.")
    limit: int | None = Field(None, ge=1, description="Capture at most this many result records in this run.")
    specforge: bool = Field(
        False,
        description="Also write SpecForge 0.2.0's offline layout under OUT/specforge (data_{i}.ckpt: the post-norm "
        "final state and the 3 aux layers; eagle3 layers only).",
    )
    force: bool = Field(
        False, description="Start even if the disk looks too small, or the output holds another capture's files."
    )
    api_key: str | None = Field(None, description="API key of the capture servers.")

    @field_validator("layers")
    @classmethod
    def _layers(cls, v: str) -> str:
        from fleetgen.capture.layers import parse_layers

        parse_layers(v)  # raises ConfigError for a word that is neither a preset nor a list
        return v

    @model_validator(mode="after")
    def _source(self) -> CaptureConfig:
        if self.backend == "vllm" and not self.fleet and not self.endpoints:
            raise ValueError("backend vllm needs a capture fleet (--fleet STATE_DIR) or --endpoint URL")
        if self.specforge and self.layers.strip().lower() != "eagle3":
            from fleetgen.errors import ConfigError

            raise ConfigError(
                f"--specforge: SpecForge's offline EAGLE-3 layout needs --layers eagle3, not {self.layers!r}",
                hint="capture with --layers eagle3 (into another -o) for SpecForge, or leave out --specforge",
            )
        if self.backend == "transformers" and not self.model and not self.fleet:
            raise ValueError("backend transformers needs --model PATH")
        return self
