"""A capture output read as its files say (docs/capture-formats.md): what it is, what it wrote, its runs.

`report`, `status` and the metrics read captures through this one reader, never through the capture
code: capture.json (identity), captured.jsonl (one line per (id, sample) whose files are whole),
runs.jsonl (start/end events), capture_errors.jsonl (records not captured, retried by a later run).
A torn last line (a kill mid-append) is skipped, as the capture's own resume cuts it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

IDENTITY, CAPTURED, RUNS, FAILED = "capture.json", "captured.jsonl", "runs.jsonl", "capture_errors.jsonl"
RECORDED = "recorded"  # ids_from of a row whose ids are the ones generate recorded; anything else came from text


@dataclass
class CaptureRunSpan:
    """One run of `fleetgen capture`: its start, its end (None: killed), and the rows journaled meanwhile."""

    started_at: float
    ended_at: float | None = None
    planned_tokens: int | None = None  # tokens still to capture when it started (its start event)
    stopped: str | None = None  # why it ended early (its end event: the disk margin), None when it went through
    rows: int = 0
    tokens: int = 0
    bytes: int = 0
    last_ts: float | None = None

    @property
    def wall_s(self) -> float:
        """The run's wall time: start to end, or to its last row when it was killed."""
        stop = self.ended_at if self.ended_at is not None else (self.last_ts or self.started_at)
        return max(0.0, stop - self.started_at)


@dataclass
class CaptureProgress:
    """Counts of one capture output; tokens and bytes are the journal's (the files' own sizes)."""

    out: Path
    identity: dict[str, Any]
    rows: int = 0  # (id, sample) captured
    files: int = 0  # hs_*.safetensors files (a record may split into several rows)
    tokens: int = 0
    bytes: int = 0
    seconds: float = 0.0  # the backend's time over the rows (sum of their `seconds`)
    from_text: int = 0  # rows whose ids were re-encoded from text, not the recorded ones
    from_text_tokens: int = 0
    failed: Counter = field(default_factory=Counter)  # reason -> records not captured (still not, now)
    runs: list[CaptureRunSpan] = field(default_factory=list)
    torn_lines: int = 0
    first_ts: float | None = None
    last_ts: float | None = None

    @property
    def recorded(self) -> int:
        return self.rows - self.from_text

    @property
    def wall_s(self) -> float:
        return sum(r.wall_s for r in self.runs)

    @property
    def tokens_per_s(self) -> float | None:
        wall = self.wall_s
        return self.tokens / wall if wall > 0 and self.runs else None


def is_capture(path: Path) -> bool:
    return (Path(path) / IDENTITY).is_file()


def _lines(path: Path) -> tuple[list[dict[str, Any]], int]:
    """A JSONL file's objects, and how many lines were unreadable (a torn tail)."""
    if not path.exists():
        return [], 0
    out, bad = [], 0
    for line in path.read_bytes().splitlines():
        if not line.strip():
            continue
        try:
            d = orjson.loads(line)
        except orjson.JSONDecodeError:
            bad += 1
            continue
        if isinstance(d, dict):
            out.append(d)
    return out, bad


def read_capture(out: Path) -> CaptureProgress:
    """Every count of the capture in `out`: streamed once over its journal (a line per captured record)."""
    out = Path(out)
    try:
        identity = orjson.loads((out / IDENTITY).read_bytes())
    except (OSError, orjson.JSONDecodeError):
        identity = {}
    p = CaptureProgress(out, identity if isinstance(identity, dict) else {})
    events, _ = _lines(out / RUNS)
    for e in events:
        if e.get("event") == "start":
            planned = e.get("planned_tokens")
            p.runs.append(CaptureRunSpan(float(e.get("ts") or 0.0), planned_tokens=planned))
        elif e.get("event") == "end" and p.runs and p.runs[-1].ended_at is None:
            p.runs[-1].ended_at = float(e.get("ts") or 0.0)
            p.runs[-1].stopped = e.get("stopped")
    captured, p.torn_lines = _lines(out / CAPTURED)
    done: set[tuple[str, int]] = set()
    for d in captured:
        key = (str(d.get("id")), int(d.get("sample") or 0))
        if key in done:
            continue  # the journal never repeats a key; a hand-edited one is counted once
        done.add(key)
        tokens, size = int(d.get("tokens") or 0), int(d.get("bytes") or 0)
        p.rows += 1
        p.files += int(d.get("rows") or 1)
        p.tokens += tokens
        p.bytes += size
        p.seconds += float(d.get("seconds") or 0.0)
        if d.get("ids_from", RECORDED) != RECORDED:
            p.from_text += 1
            p.from_text_tokens += tokens
        ts = d.get("ts")
        if ts is not None:
            ts = float(ts)
            p.first_ts = ts if p.first_ts is None else min(p.first_ts, ts)
            p.last_ts = ts if p.last_ts is None else max(p.last_ts, ts)
            run = next((r for r in reversed(p.runs) if r.started_at <= ts), None)
            if run is not None:
                run.rows += 1
                run.tokens += tokens
                run.bytes += size
                run.last_ts = ts if run.last_ts is None else max(run.last_ts, ts)
    failures, _ = _lines(out / FAILED)
    last_reason: dict[tuple[str, int], str] = {}
    for f in failures:
        last_reason[(str(f.get("id")), int(f.get("sample") or 0))] = str(f.get("reason") or "unknown")
    p.failed = Counter(reason for key, reason in last_reason.items() if key not in done)
    return p


def find_captures(results_dir: Path) -> list[Path]:
    """Capture outputs beside a generate output (its siblings and children) whose capture.json names it as source."""
    results_dir = Path(results_dir).resolve()
    seen = []
    for parent in (results_dir.parent, results_dir):
        for cand in sorted(parent.iterdir()) if parent.is_dir() else []:
            if cand.is_dir() and is_capture(cand) and cand not in seen:
                try:
                    source = orjson.loads((cand / IDENTITY).read_bytes()).get("source")
                except (OSError, orjson.JSONDecodeError, AttributeError):
                    continue
                if source and Path(source).resolve() == results_dir:
                    seen.append(cand)
    return seen
