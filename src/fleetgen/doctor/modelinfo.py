"""What the doctor reads from a checkpoint: config.json and the size of the weight files."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

HYBRID_MODEL_TYPES = {
    "qwen3_next",
    "qwen3_5",
    "qwen3_5_moe",
    "jamba",
    "nemotron_h",
    "falcon_h1",
    "granitemoehybrid",
    "bamba",
    "zamba2",
    "lfm2",
    "minimax_m1",
    "plamo2",
}
LINEAR_LAYER_TYPES = {"linear_attention", "mamba", "mamba2", "ssm", "conv", "recurrent", "gated_deltanet"}
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}


@dataclass(frozen=True)
class ModelInfo:
    path: Path
    config: dict  # the text model's config (text_config where the checkpoint nests one)
    weight_bytes: int

    @property
    def model_type(self) -> str:
        return str(self.config.get("model_type", ""))

    @property
    def layer_types(self) -> list[str]:
        return [str(t) for t in self.config.get("layer_types") or []]

    @property
    def is_hybrid(self) -> bool:
        return (
            self.model_type in HYBRID_MODEL_TYPES
            or any(t in LINEAR_LAYER_TYPES for t in self.layer_types)
            or any(
                k in self.config
                for k in ("full_attention_interval", "linear_num_value_heads", "mamba_d_state", "attn_layer_indices")
            )
        )

    @property
    def attention_layers(self) -> int:
        """Layers that keep a KV cache: full-attention ones only in a hybrid model."""
        n = int(self.config.get("num_hidden_layers", 0))
        if self.layer_types:
            return sum(1 for t in self.layer_types if t not in LINEAR_LAYER_TYPES and "sliding" not in t) or n
        if "full_attention_interval" in self.config:
            return n // int(self.config["full_attention_interval"])
        if "attn_layer_indices" in self.config:
            return len(self.config["attn_layer_indices"])
        return n

    @property
    def kv_bytes_per_token(self) -> int:
        c = self.config
        heads = int(c.get("num_attention_heads", 1))
        kv_heads = int(c.get("num_key_value_heads") or heads)
        head_dim = int(c.get("head_dim") or int(c.get("hidden_size", 0)) // max(heads, 1))
        dtype = str(c.get("torch_dtype") or c.get("dtype") or "bfloat16")
        return 2 * self.attention_layers * kv_heads * head_dim * DTYPE_BYTES.get(dtype, 2)

    @property
    def max_context(self) -> int | None:
        v = self.config.get("max_position_embeddings")
        return int(v) if v else None


def read_model(path: Path) -> ModelInfo:
    """Read config.json and sum weight files; raises OSError / ValueError on an unreadable checkpoint."""
    cfg = json.loads((path / "config.json").read_text(encoding="utf-8"))
    text = cfg.get("text_config") or cfg.get("llm_config") or cfg
    if text is not cfg:
        text = {**{k: v for k, v in cfg.items() if k != "text_config"}, **text}
    files = [f for pat in ("*.safetensors", "*.bin", "*.pt", "*.gguf") for f in path.glob(pat)]
    return ModelInfo(path=path, config=text, weight_bytes=sum(f.stat().st_size for f in files))
