"""A transformers forward over the recorded ids: the backend where no serving engine captures.

Rows are grouped by length into batches of up to `batch_tokens` padded tokens and run through the
hooked forward (forward.py: how each index is taken and why padding cannot mix rows up).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Iterable
from typing import Any

from fleetgen.capture.backends.base import Backend, Captured, Failed, Outcome
from fleetgen.capture.forward import HiddenStateForward, load_model
from fleetgen.capture.inputs import CaptureItem

__all__ = ["HiddenStateForward", "TransformersBackend", "batches", "load_model"]

log = logging.getLogger("fleetgen.capture.transformers")


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
        """Outcomes batch by batch; the next batch's forward runs (in a thread) while the caller writes this one's
        files, so the device is not idle during the disk's turn (on an H100 the writes set the pace)."""
        import asyncio

        got: dict[int, dict[int, Any]] = {}
        spent: dict[int, float] = {}
        failed: set[int] = set()  # items with a row in a failed batch: their other rows are dropped

        def timed(rows: list[list[int]]) -> tuple[list[Any], float]:
            t0 = time.perf_counter()
            return self.forward(rows), time.perf_counter() - t0

        source = iter(batches(items, self.batch_tokens))

        def start(batch: list[tuple[CaptureItem, int]] | None) -> asyncio.Future | None:
            if batch is None:
                return None
            return asyncio.ensure_future(asyncio.to_thread(timed, [it.rows[j].input_ids for it, j in batch]))

        batch = next(source, None)
        running = start(batch)
        try:
            while batch is not None and running is not None:
                try:
                    out, seconds = await running
                    error = None
                except RuntimeError as e:  # out of memory and kernel errors: the batch's items fail, the run goes on
                    out, seconds, error = [], 0.0, e
                current = batch
                batch = next(source, None)
                running = start(batch)  # before this batch's outcomes are written
                if error is not None:
                    log.warning("forward of %d rows failed: %s", len(current), error)
                    for it in {id(it): it for it, _ in current}.values():
                        got.pop(id(it), None)
                        if id(it) not in failed:
                            failed.add(id(it))
                            yield Failed(it, f"forward failed: {error}")
                    continue
                share = seconds / max(1, sum(len(it.rows[j].input_ids) for it, j in current))
                for (it, j), hs in zip(current, out, strict=True):
                    if id(it) in failed:
                        continue
                    rows = got.setdefault(id(it), {})
                    rows[j] = hs
                    spent[id(it)] = spent.get(id(it), 0.0) + share * len(it.rows[j].input_ids)
                    if len(rows) == len(it.rows):
                        del got[id(it)]
                        yield Captured(it, [rows[k] for k in range(len(it.rows))], spent.pop(id(it)))
        finally:
            if running is not None:
                self.forward.cancel()  # a thread cannot be cancelled: its forward stops at the next layer
                running.cancel()
                await asyncio.gather(running, return_exceptions=True)
