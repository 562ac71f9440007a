"""A transformers forward over the recorded ids: the backend where no serving engine captures (and the GPU bench).

Hooks on the decoder layers take each wanted index (capture/layers.py): index 0 from the embeddings,
index k from decoder layer k-1's output, so index N is the last layer's output before the final norm,
as vLLM gives it. The base model runs without the LM head, and stops after the deepest wanted layer.

Batching: rows are grouped by length up to `batch_tokens` (padded), padded on the right with an
attention mask. With causal attention a real token never attends to a pad after it and positions
start at 0 for every row, so each row's hidden states are its own (speculators #279 was rows whose
states came out wrong at batch > 1); tests/capture/test_transformers_backend.py compares batched with
one-row forwards.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Iterable
from typing import Any

from fleetgen.capture.backends.base import Backend, Captured, Failed, Outcome
from fleetgen.capture.inputs import CaptureItem
from fleetgen.errors import ConfigError

log = logging.getLogger("fleetgen.capture.transformers")


class _Stop(Exception):
    """Raised by the deepest wanted layer's hook: the layers above it are not needed."""


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

    def __call__(self, rows: list[list[int]]) -> list[Any]:
        """Each row's hidden states [seq, layers, hidden] (one forward, rows right-padded)."""
        import torch

        caught: dict[int, Any] = {}
        deepest = self.layers[-1]

        def keep(k: int):
            def hook(_module: Any, _args: Any, output: Any) -> None:
                caught[k] = output[0] if isinstance(output, tuple) else output
                if k == deepest and k > 0:
                    raise _Stop

            return hook

        handles = []
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
        return [stacked[i, : len(r)].to("cpu") for i, r in enumerate(rows)]


def batches(
    items: Iterable[CaptureItem], batch_tokens: int, lookahead: int = 64
) -> Iterable[list[tuple[CaptureItem, int]]]:
    """(item, row) pairs grouped into batches of at most `batch_tokens` padded tokens, similar lengths together.

    Items are read `lookahead` at a time and sorted by length, so padding stays small and memory bounded.
    """
    pending: list[CaptureItem] = []

    def flush() -> Iterable[list[tuple[CaptureItem, int]]]:
        rows = sorted(
            ((it, j) for it in pending for j in range(len(it.rows))), key=lambda p: len(p[0].rows[p[1]].input_ids)
        )
        batch: list[tuple[CaptureItem, int]] = []
        for pair in rows:
            n = len(pair[0].rows[pair[1]].input_ids)
            if batch and n * (len(batch) + 1) > batch_tokens:
                yield batch
                batch = []
            batch.append(pair)
        if batch:
            yield batch

    for it in items:
        pending.append(it)
        if len(pending) >= lookahead:
            yield from flush()
            pending = []
    if pending:
        yield from flush()


class TransformersBackend(Backend):
    """Items captured by HiddenStateForward, in batches of similar length; an item is done when all its rows are."""

    name = "transformers"

    def __init__(self, model: Any, layers: list[int], batch_tokens: int = 8192) -> None:
        super().__init__(layers)
        self.forward = HiddenStateForward(model, layers)
        self.batch_tokens = batch_tokens

    async def outcomes(self, items: Iterable[CaptureItem]) -> AsyncIterator[Outcome]:  # type: ignore[override]
        import asyncio

        got: dict[int, dict[int, Any]] = {}
        spent: dict[int, float] = {}
        failed: set[int] = set()  # items with a row in a failed batch: their other rows are dropped
        for batch in batches(items, self.batch_tokens):
            t0 = time.perf_counter()
            try:
                # In a thread: the forward holds no lock the loop needs, and the loop stays free for signals.
                out = await asyncio.to_thread(self.forward, [it.rows[j].input_ids for it, j in batch])
            except RuntimeError as e:  # out of memory and kernel errors: the batch's items fail, the run goes on
                log.warning("forward of %d rows failed: %s", len(batch), e)
                for it in {id(it): it for it, _ in batch}.values():
                    got.pop(id(it), None)
                    if id(it) not in failed:
                        failed.add(id(it))
                        yield Failed(it, f"forward failed: {e}")
                continue
            share = (time.perf_counter() - t0) / max(1, sum(len(it.rows[j].input_ids) for it, j in batch))
            for (it, j), hs in zip(batch, out, strict=True):
                if id(it) in failed:
                    continue
                rows = got.setdefault(id(it), {})
                rows[j] = hs
                spent[id(it)] = spent.get(id(it), 0.0) + share * len(it.rows[j].input_ids)
                if len(rows) == len(it.rows):
                    del got[id(it)]
                    yield Captured(it, [rows[k] for k in range(len(it.rows))], spent.pop(id(it)))
