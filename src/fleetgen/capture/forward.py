"""The hooked forward behind the transformers backend: the wanted layers' hidden states of token rows.

Hooks on the decoder layers take each wanted index (capture/layers.py): index 0 from the embeddings,
index k from decoder layer k-1's output, so index N is the last layer's output before the final norm,
as vLLM gives it. The base model runs without the LM head, and stops after the deepest wanted layer.
Rows are padded on the right with an attention mask: with causal attention a real token never attends
to a pad after it and positions start at 0 in every row, so each row's states are its own (speculators
#279 was rows whose states came out wrong at batch > 1; tests/capture/test_transformers_backend.py
compares batched with one-row forwards in float32). Needs only torch and transformers (bench/capture_bench.py
runs it on GPU machines that have nothing else).
"""

from __future__ import annotations

import threading
from typing import Any

from fleetgen.errors import ConfigError


class _Stop(Exception):
    """Raised by the deepest wanted layer's hook: the layers above it are not needed."""


class ForwardCancelled(Exception):
    """Raised at the next decoder layer once `HiddenStateForward.cancel()` is called: a Ctrl-C need not wait out
    a batch that runs in a thread (one of 8,192 tokens took minutes on a 2-core CPU)."""


def load_model(path: str, device: str = "cpu", dtype: str = "bf16") -> Any:
    """The target model for a forward (bf16 unless told), in eval mode on `device`."""
    import torch
    from transformers import AutoModelForCausalLM

    torch_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype)
    except Exception as e:  # OSError, ValueError and friends for a bad path or config
        raise ConfigError(
            f"cannot load the model at {path}: {e}", hint="pass --model PATH (a model directory)"
        ) from None
    return model.to(device).eval()


class HiddenStateForward:
    """The wanted layers' hidden states of token rows, by a hooked forward of the model's decoder."""

    def __init__(self, model: Any, layers: list[int]) -> None:
        self.model = model
        self.decoder = model.get_decoder() if hasattr(model, "get_decoder") else model.model
        self.blocks = self.decoder.layers
        self.layers = sorted(layers)
        if self.layers[-1] > len(self.blocks):
            raise ConfigError(f"layer {self.layers[-1]} is past the model's {len(self.blocks)} layers")
        self.device = next(model.parameters()).device
        self._cancelled = threading.Event()

    def cancel(self) -> None:
        """Stop a forward running in another thread at its next layer, and every later one."""
        self._cancelled.set()

    def __call__(self, rows: list[list[int]], to_host: bool = True) -> list[Any]:
        """Each row's hidden states [seq, layers, hidden] (one forward, rows right-padded); on the model's device
        unless `to_host`."""
        import torch

        caught: dict[int, Any] = {}
        deepest = self.layers[-1]

        def keep(k: int):
            def hook(_module: Any, _args: Any, output: Any) -> None:
                caught[k] = output[0] if isinstance(output, tuple) else output
                if k == deepest and k > 0:
                    raise _Stop

            return hook

        def check(_module: Any, _args: Any) -> None:
            if self._cancelled.is_set():
                raise ForwardCancelled("the capture was stopped")

        handles = [block.register_forward_pre_hook(check) for block in self.blocks[:deepest]]
        for k in self.layers:
            module = self.decoder.embed_tokens if k == 0 else self.blocks[k - 1]
            handles.append(module.register_forward_hook(keep(k)))
        longest = max(len(r) for r in rows)
        ids = torch.zeros((len(rows), longest), dtype=torch.long)
        mask = torch.zeros((len(rows), longest), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
            mask[i, : len(r)] = 1
        try:
            with torch.inference_mode():
                try:
                    self.decoder(input_ids=ids.to(self.device), attention_mask=mask.to(self.device), use_cache=False)
                except _Stop:
                    pass
        finally:
            for h in handles:
                h.remove()
        stacked = torch.stack([caught[k] for k in self.layers], dim=2)  # [batch, seq, layers, hidden]
        return [stacked[i, : len(r)].to("cpu") if to_host else stacked[i, : len(r)] for i, r in enumerate(rows)]
