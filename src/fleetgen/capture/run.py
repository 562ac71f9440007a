"""`fleetgen capture`: hidden states of a generate run's rows, each (id, sample) exactly once, resumable.

The run: resolve the model and layers, write or check capture.json, read the journal (what is done),
check the disk holds the rest, then stream the records not yet done through the backend. One writer
(this loop) writes each row's file whole (temp, fsync, rename) at the next free index, then appends
the record's journal line: a kill before the line leaves a file the next run overwrites, never one
it counts. At the end the Arrow dataset is rewritten from the journal, so row i is hs_i (and, with --specforge,
SpecForge's layout is written from them: capture/specforge.py).
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleetgen.capture import storage
from fleetgen.capture.backends.base import Backend, Captured
from fleetgen.capture.config import CaptureConfig
from fleetgen.capture.dataset import HS_DIR, hs_name, write_dataset
from fleetgen.capture.inputs import RECORDED, CaptureItem, Rejected, TokenRow, iter_items
from fleetgen.capture.journal import Journal
from fleetgen.capture.source import Source, resolve_source
from fleetgen.capture.tensors import IdsMismatch, check_ids, encode, write_file
from fleetgen.errors import InputError, LeaseHeldError
from fleetgen.export.results import ReadCounts, iter_results

log = logging.getLogger("fleetgen.capture")


@dataclass
class CaptureSummary:
    """What one run did; the CLI prints it, runs.jsonl records it."""

    output: Path
    layers: list[int]
    bytes_per_token: int
    planned_tokens: int = 0
    already: int = 0
    captured: int = 0
    rows: int = 0
    tokens: int = 0
    bytes: int = 0
    from_text: int = 0
    failed: int = 0
    seconds: float = 0.0
    stopped: str | None = None  # why the run ended early (disk margin); None when it went through
    total_captured: int = 0
    specforge_written: int = 0  # --specforge: OUT/specforge files this run wrote (the others were already whole)
    specforge_kept: int = 0
    failures: dict[str, int] = field(default_factory=dict)

    def counters(self) -> dict[str, Any]:
        keys = ("captured", "rows", "tokens", "bytes", "from_text", "failed", "already", "total_captured")
        return {k: getattr(self, k) for k in keys} | {"seconds": round(self.seconds, 3), "stopped": self.stopped}


def _lock(out: Path) -> int:
    """One capture writes an output at a time: a second would give the same indices to other rows."""
    fd = os.open(out / ".capture.lock", os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise LeaseHeldError(f"another capture is writing {out}", hint="wait for it, or write elsewhere (-o)") from None
    return fd


def _planned(results_dir: Path, journal: Journal, limit: int | None) -> tuple[int, int]:
    """(tokens, records) still to capture, from the counts generate recorded (tokens: an upper bound for multi-turn)."""
    total = n = 0
    for rec in iter_results(results_dir, ReadCounts()):
        if journal.done(str(rec.get("id")), int(rec.get("sample") or 0)):
            continue
        usage = rec.get("usage") or {}
        total += int(usage.get("prompt_tokens") or 0) + int(usage.get("completion_tokens") or 0)
        n += 1
        if limit and n >= limit:
            break
    return total, n


def _clean_leftovers(out: Path, next_index: int) -> None:
    """Remove temporaries a kill left, and files past the journal's last index (never counted, now gone)."""
    hs = out / HS_DIR
    if not hs.is_dir():
        return
    for p in hs.iterdir():
        if p.name.endswith(".tmp"):
            p.unlink(missing_ok=True)
        elif p.name.startswith("hs_") and p.name.endswith(".safetensors"):
            try:
                k = int(p.name[3 : -len(".safetensors")])
            except ValueError:
                continue
            if k >= next_index:
                p.unlink(missing_ok=True)


class CaptureRun:
    """One run over one output directory; `run()` is the whole of it."""

    def __init__(self, cfg: CaptureConfig, on_progress: Callable[[CaptureSummary], None] | None = None) -> None:
        self.cfg = cfg
        self.out = Path(cfg.output)
        self.on_progress = on_progress or (lambda s: None)
        self.journal = Journal(self.out)

    def _items(self, tokenizer: Any, summary: CaptureSummary) -> Iterator[CaptureItem]:
        n = 0
        for it in iter_items(self.cfg.results_dir, tokenizer, self.journal.done, max_length=self.cfg.max_length):
            if isinstance(it, Rejected):
                summary.failed += 1
                summary.failures[it.reason] = summary.failures.get(it.reason, 0) + 1
                self.journal.failed(it.id, it.sample, it.reason)
                continue
            yield it
            n += 1
            if self.cfg.limit and n >= self.cfg.limit:
                return

    def _write(self, outcome: Captured, summary: CaptureSummary) -> None:
        """The item's files at the next free indices, each whole, then its journal line."""
        item = outcome.item
        index = self.journal.next_index
        written = 0
        for j, (row, hidden) in enumerate(zip(item.rows, outcome.hidden, strict=True)):
            tensors = encode(hidden, row.input_ids, self.cfg.dtype)
            check_ids(tensors["token_ids"], row.input_ids, f"{item.id}#{item.sample}")  # what is stored = recorded
            written += write_file(self.out / hs_name(index + j), tensors)
        lengths = [len(r.input_ids) for r in item.rows]
        self.journal.append(
            {
                "id": item.id,
                "sample": item.sample,
                "index": index,
                "file": hs_name(index),
                "rows": len(item.rows),
                "lengths": lengths,
                "tokens": sum(lengths),
                "bytes": written,
                "seconds": round(outcome.seconds, 4),
                "ids_from": item.ids_from,
                "ts": round(time.time(), 3),
            }
        )
        summary.captured += 1
        summary.rows += len(item.rows)
        summary.tokens += sum(lengths)
        summary.bytes += written
        summary.from_text += item.ids_from != RECORDED

    async def _loop(self, backend: Backend, tokenizer: Any, summary: CaptureSummary) -> None:
        outcomes = backend.outcomes(self._items(tokenizer, summary))
        try:
            async for outcome in outcomes:
                if isinstance(outcome, Captured):
                    upcoming = sum(len(r.input_ids) for r in outcome.item.rows) * summary.bytes_per_token
                    if not storage.room_left(self.out, upcoming=upcoming):  # before the file: none half-written
                        summary.stopped = "free disk space fell under the margin"
                        log.warning("stopping: %s (%s)", summary.stopped, self.out)
                        return
                    try:
                        self._write(outcome, summary)
                    except IdsMismatch as e:
                        summary.failed += 1
                        self.journal.failed(outcome.item.id, outcome.item.sample, str(e))
                else:
                    summary.failed += 1
                    summary.failures[outcome.reason] = summary.failures.get(outcome.reason, 0) + 1
                    self.journal.failed(outcome.item.id, outcome.item.sample, outcome.reason)
                self.on_progress(summary)
        finally:
            await outcomes.aclose()  # type: ignore[attr-defined]
            await backend.aclose()

    def finish_dataset(self, tokenizer: Any) -> None:
        """The Arrow dataset of every journaled row, row i = hs_i; checked against the journal's lengths."""
        entries = self.journal.entries
        rows: list[TokenRow | None] = [None] * self.journal.next_index
        for it in iter_items(self.cfg.results_dir, tokenizer, lambda i, s: (i, s) not in entries):
            if isinstance(it, Rejected):
                continue
            e = entries[(it.id, it.sample)]
            if [len(r.input_ids) for r in it.rows] != e.lengths:
                raise InputError(
                    f"{self.cfg.results_dir}: record {it.id}#{it.sample} now gives rows of other lengths than "
                    f"captured ({e.lengths})",
                    hint="the results or the tokenizer changed since the capture: capture into a new directory",
                )
            for j, r in enumerate(it.rows):
                rows[e.index + j] = r
        missing = [i for i, r in enumerate(rows) if r is None]
        if missing:
            raise InputError(
                f"{self.cfg.results_dir}: {len(missing)} captured rows are no longer in the results "
                f"(first: hs_{missing[0]})",
                hint="capture needs the results it read; restore them or capture into a new directory",
            )
        write_dataset(self.out, rows)  # type: ignore[arg-type]

    def run(self) -> CaptureSummary:
        cfg = self.cfg
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / HS_DIR).mkdir(exist_ok=True)
        fd = _lock(self.out)
        try:
            source: Source = resolve_source(cfg)
            self.journal.check_identity(source.identity(cfg), force=cfg.force)
            self.journal.load()
            _clean_leftovers(self.out, self.journal.next_index)
            summary = CaptureSummary(self.out, source.layers, source.bytes_per_token)
            summary.already = len(self.journal.entries)
            summary.planned_tokens, records = _planned(cfg.results_dir, self.journal, cfg.limit)
            est = storage.estimate(
                source.hidden_size, len(source.layers), cfg.dtype, tokens=summary.planned_tokens, rows=records
            )
            log.info("storage: %s", storage.storage_line(est, cfg.layers))
            needed = est.total
            if cfg.specforge:  # its files again: 4 bf16 layers a token (3 aux + the final state) and the ids
                sf = storage.estimate(source.hidden_size, 4, "bf16", tokens=summary.planned_tokens, rows=records)
                log.info("storage: %s", storage.storage_line(sf, "specforge"))
                needed += sf.total
            storage.check_disk(self.out, needed, force=cfg.force)
            self.journal.event(
                "start", backend=cfg.backend, already=summary.already, planned_tokens=summary.planned_tokens
            )
            t0 = time.perf_counter()
            backend = source.backend(cfg)
            try:
                asyncio.run(self._loop(backend, source.tokenizer, summary))
            finally:
                summary.seconds = time.perf_counter() - t0
                summary.total_captured = len(self.journal.entries)
                self.journal.close()
                self.journal.event("end", **summary.counters())
            self.finish_dataset(source.tokenizer)
            _clean_leftovers(self.out, self.journal.next_index)
            if cfg.specforge:  # from the journal, files and dataset just written: every journaled row
                from fleetgen.capture.specforge import write_specforge

                sf = write_specforge(self.out, source.model_path)
                summary.specforge_written, summary.specforge_kept = sf.written, sf.kept
                summary.stopped = summary.stopped or sf.stopped
            return summary
        finally:
            os.close(fd)


def capture(cfg: CaptureConfig, on_progress: Callable[[CaptureSummary], None] | None = None) -> CaptureSummary:
    """Capture the target's hidden states for `cfg.results_dir` into `cfg.output` (see the module docstring)."""
    return CaptureRun(cfg, on_progress).run()
