"""The fleet section of the config tree: what `fleetgen up` starts."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from fleetgen.config import StrictModel

DEFAULT_STATE_DIR = Path(".fleetgen/fleet")


class FleetConfig(StrictModel):
    engine: Literal["vllm", "sglang"] = Field("vllm", description="Inference engine each replica runs.")
    model: str = Field("smollm2", description="Model path, or 'smollm2' for the embedded default.")
    served_model_name: str | None = Field(
        None, description="Name the servers answer to; defaults to the model path's last part."
    )
    replicas: int | None = Field(None, ge=1, description="Number of replicas; default: one per GPU group, or 1 on CPU.")
    gpus: str = Field("all", description="GPUs to use: 'all', 'none' (CPU engine), or a list like '0,1,2,3'.")
    tp: int = Field(1, ge=1, description="Tensor-parallel size: GPUs per replica.")
    replicas_per_gpu: int = Field(
        1,
        ge=1,
        le=16,
        description="Replicas sharing each GPU group (a model far smaller than the GPU): each its own process, "
        "port and memory share; replicas of one GPU start one after another. Local GPU fleets only.",
    )
    host: str = Field("127.0.0.1", description="Address the servers bind to (loopback unless told).")
    port_base: int = Field(30000, ge=1024, le=65000, description="Replica i listens on port_base + i.")
    state_dir: Path = Field(DEFAULT_STATE_DIR, description="Directory holding the fleet's state and logs.")
    api_key: SecretStr | None = Field(
        None, description="API key the servers require; also read from FLEETGEN_API_KEY. Never logged."
    )
    max_running_requests: int | None = Field(
        None,
        ge=1,
        description="Requests each server runs at once (vLLM --max-num-seqs, SGLang --max-running-requests).",
    )
    context_length: int | None = Field(
        None, ge=16, description="Context length (vLLM --max-model-len, SGLang --context-length)."
    )
    enforce_eager: bool = Field(
        False, description="Skip graph capture and torch.compile: faster start, slightly slower decode."
    )
    cpu_kv_cache_gb: float = Field(2.0, gt=0, description="KV cache per CPU replica in GiB (VLLM_CPU_KVCACHE_SPACE).")
    tool_call_parser: str | None = Field(
        None,
        description="Parse the model's tool calls into OpenAI tool_calls (vLLM --enable-auto-tool-choice "
        "--tool-call-parser NAME, SGLang --tool-call-parser NAME); e.g. qwen3_coder for Qwen3.5/3.6. "
        "Unset: the servers return tool calls as text and fleetgen sends tool_choice none.",
    )
    prefix_cache: bool | None = Field(
        None,
        description="Keep finished requests' KV in the engine's prefix cache. Unset: off on SGLang "
        "(--disable-radix-cache: once its radix cache fills the KV pool, every decode step pays an eviction pass "
        "over all cached answers; docs/sglang.md), the engine's own default on vLLM. On: SGLang's default; "
        "vLLM --enable-prefix-caching. Off: vLLM --no-enable-prefix-caching.",
    )
    engine_args: list[str] = Field(default_factory=list, description="Extra engine flags passed through verbatim.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment for every replica.")
    python: str | None = Field(
        None, description="Interpreter that runs the engine (a venv with the engine installed); default: this one."
    )
    doctor: bool = Field(
        True, description="On GPUs, run `fleetgen doctor` checks first and refuse to launch when one fails."
    )
    fix_dir: Path | None = Field(
        None,
        description="Directory written by `fleetgen doctor --fix`: its environment and engine flags apply to every "
        "replica.",
    )
    warm_first: bool = Field(
        True,
        description="On GPUs with cold compile caches, start replica 0 alone, copy its caches to the others, then "
        "start them together.",
    )
    startup_timeout_s: float = Field(1200, gt=0, description="Give up on a replica not ready after this long.")
    stall_timeout_s: float = Field(
        600, gt=0, description="Give up on a replica whose log shows no progress for this long."
    )
    stop_grace_s: float = Field(20, ge=0, description="Seconds between SIGTERM and SIGKILL on `down`.")
    ray: str | None = Field(
        None,
        description="Ray cluster address ('auto', or the head's host:port): replicas run as Ray actors "
        "across its nodes instead of local processes. Unset: a local fleet.",
    )
    ray_num_cpus: float = Field(
        1, ge=0, description="CPUs each replica's Ray actor reserves (the whole replica on CPU, its driver on GPU)."
    )
    ray_resources: dict[str, float] = Field(
        default_factory=dict,
        description="Custom Ray resources each replica reserves, e.g. {'inference': 1} to keep replicas on labelled "
        "nodes.",
    )
    ray_schedule_timeout_s: float = Field(
        120, gt=0, description="Give up on a replica whose placement group Ray cannot place within this long."
    )

    @field_validator("gpus")
    @classmethod
    def _check_gpus(cls, v: str) -> str:
        v = v.strip()
        if v in ("all", "none"):
            return v
        try:
            ids = [int(x) for x in v.split(",") if x.strip()]
        except ValueError:
            raise ValueError(f"gpus must be 'all', 'none' or a comma list of integers, got {v!r}") from None
        if not ids or len(set(ids)) != len(ids) or min(ids) < 0:
            raise ValueError(f"gpus must list distinct non-negative ids, got {v!r}")
        return ",".join(str(i) for i in ids)

    @model_validator(mode="after")
    def _check_sharing(self) -> FleetConfig:
        if self.replicas_per_gpu > 1 and self.ray is not None:
            raise ValueError("replicas_per_gpu > 1 is for local fleets; a Ray fleet places one replica per GPU group")
        if self.replicas_per_gpu > 1 and self.gpus == "none":
            raise ValueError("replicas_per_gpu > 1 needs GPUs; CPU replicas already share the cores (cpu_shares)")
        return self
