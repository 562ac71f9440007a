"""The doctor's config section; each field is the one place its CLI flag is documented."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from fleetgen.config import StrictModel


class DoctorConfig(StrictModel):
    engine: Literal["sglang", "vllm"] | None = Field(
        None,
        description="Engine whose kernels and attention backend to check; none checks GPUs, torch and the toolchain.",
    )
    model: str | None = Field(
        None, description="Checkpoint directory (or 'smollm2') for the memory plan and hybrid-model flags."
    )
    python: str | None = Field(
        None, description="Interpreter that runs the engine (its torch and kernels are checked); default: this one."
    )
    tp: int = Field(1, ge=1, description="Tensor-parallel size the fleet will use (GPUs per replica).")
    mem_fraction: float = Field(
        0.85, gt=0, lt=1, description="Share of each GPU's memory the engine takes for weights and KV cache."
    )
    max_running_requests: int | None = Field(
        None, ge=1, description="Requests each replica runs at once; the memory plan checks they fit at full context."
    )
    context_length: int | None = Field(
        None, ge=16, description="Context length per request; default: the model's max_position_embeddings."
    )
    engine_args: list[str] = Field(
        default_factory=list,
        description="Engine flags you intend to pass (checked, e.g. --attention-backend fa3 on sm_120).",
    )
