"""The capture journal: what a capture is (capture.json), what it has written (captured.jsonl), its runs (runs.jsonl).

A contract with `report`, `status` and the metrics (docs/capture-formats.md):
- capture.json: {"model", "layers", "dtype", "backend", "hidden_size", "num_layers", "bytes_per_token",
  "source", "format": "speculators", ...}; a resume with another identity is refused unless forced.
- captured.jsonl: one line per captured (id, sample), appended and fsynced only after every file of it
  is whole: {"id", "sample", "index", "file", "tokens", "bytes", "seconds", "ids_from", "ts"} and "rows"
  (files index..index+rows-1; 1 unless the record's rows split) and "lengths" (each row's tokens).
- runs.jsonl: {"event": "start"|"end", "ts", ...counters} per run.
Resume reads the keys and the highest index used; a torn last line (a kill mid-append) is cut off, and
a file past the highest journaled index is an orphan that the next write replaces.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from fleetgen.atomic import fsync_dir, write_atomic
from fleetgen.errors import OutputError, ResumeMismatchError

IDENTITY, CAPTURED, RUNS, FAILED = "capture.json", "captured.jsonl", "runs.jsonl", "capture_errors.jsonl"
# Fields of capture.json that must match on resume: another model, layer set, dtype or source is another capture.
SAME = ("model", "layers", "dtype", "source", "format", "hidden_size", "num_layers")


@dataclass
class Entry:
    """One captured (id, sample), as its journal line says."""

    id: str
    sample: int
    index: int
    rows: int
    tokens: int
    bytes: int
    ids_from: str
    lengths: list[int] = field(default_factory=list)


class Journal:
    """OUT's journal files; one writer (the runner's) appends, under the output's lock."""

    def __init__(self, out: Path) -> None:
        self.out = Path(out)
        self.entries: dict[tuple[str, int], Entry] = {}
        self.next_index = 0
        self._f: Any = None

    @property
    def path(self) -> Path:
        return self.out / CAPTURED

    def check_identity(self, identity: dict[str, Any], *, force: bool) -> None:
        """Write capture.json, or refuse a resume whose identity differs (unless forced)."""
        path = self.out / IDENTITY
        if path.exists():
            try:
                old = orjson.loads(path.read_bytes())
            except orjson.JSONDecodeError:
                old = {}
            diff = [k for k in SAME if k in old and old.get(k) != identity.get(k)]
            if diff and not force:
                named = "; ".join(f"{k}: {old.get(k)!r} then, {identity.get(k)!r} now" for k in diff)
                raise ResumeMismatchError(
                    f"{path} belongs to another capture ({named})",
                    hint="use another -o directory, or pass --force to add to it anyway",
                )
        write_atomic(path, orjson.dumps(identity, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))

    def load(self) -> None:
        """Read the journal: every key done and the next free index; cut a torn last line."""
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        end = data.rfind(b"\n") + 1
        if end < len(data):  # a line the kill cut: never read as done, and not glued to the next append
            with open(self.path, "rb+") as f:
                f.truncate(end)
                os.fsync(f.fileno())
        for line in data[:end].splitlines():
            if not line.strip():
                continue
            try:
                d = orjson.loads(line)
                e = Entry(
                    str(d["id"]),
                    int(d["sample"]),
                    int(d["index"]),
                    int(d.get("rows", 1)),
                    int(d["tokens"]),
                    int(d["bytes"]),
                    str(d.get("ids_from", "recorded")),
                    list(d.get("lengths") or [d["tokens"]]),
                )
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                continue
            if (e.id, e.sample) in self.entries:
                continue  # never written twice by this journal; kept first if a hand-edit repeats one
            self.entries[(e.id, e.sample)] = e
            self.next_index = max(self.next_index, e.index + e.rows)

    def done(self, rid: str, sample: int) -> bool:
        return (rid, sample) in self.entries

    def append(self, line: dict[str, Any]) -> None:
        """One captured (id, sample), durable before this returns."""
        if self._f is None:
            new = not self.path.exists()
            self._f = open(self.path, "ab")  # noqa: SIM115 - held open for the run's appends
            if new:
                fsync_dir(self.out)
        try:
            self._f.write(orjson.dumps(line) + b"\n")
            self._f.flush()
            os.fsync(self._f.fileno())
        except OSError as e:
            raise OutputError(f"cannot append to {self.path}: {e}", hint="check free space of the output") from None
        e = Entry(
            line["id"],
            line["sample"],
            line["index"],
            line["rows"],
            line["tokens"],
            line["bytes"],
            line["ids_from"],
            line["lengths"],
        )
        self.entries[(e.id, e.sample)] = e
        self.next_index = max(self.next_index, e.index + e.rows)

    def event(self, kind: str, **counters: Any) -> None:
        """A run's start or end in runs.jsonl."""
        with open(self.out / RUNS, "ab") as f:
            f.write(orjson.dumps({"event": kind, "ts": round(time.time(), 3), **counters}) + b"\n")
            f.flush()
            os.fsync(f.fileno())

    def failed(self, rid: str, sample: int, reason: str) -> None:
        """A record capture could not do; a later run tries it again (it is not in captured.jsonl)."""
        with open(self.out / FAILED, "ab") as f:
            f.write(orjson.dumps({"id": rid, "sample": sample, "reason": reason, "ts": round(time.time(), 3)}) + b"\n")

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None
