"""Reading the result records `fleetgen generate` wrote, streamed, each (id, sample) once."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from fleetgen.errors import InputError
from fleetgen.rows.doneset import DoneSet
from fleetgen.rows.result import ErrorRow, ResultRow

THINK_MARKERS = ("<think>", "</think>")


@dataclass
class ReadCounts:
    """What reading found besides good records: unparsable lines and repeated (id, sample) pairs."""

    corrupt_lines: int = 0
    duplicates: int = 0
    files: list[Path] = field(default_factory=list)


def result_files(outdir: Path) -> list[Path]:
    """results.jsonl and any results*.jsonl beside it, in a fixed order."""
    outdir = Path(outdir)
    if not outdir.is_dir():
        raise InputError(f"results directory not found: {outdir}", hint="pass the -o directory of `fleetgen generate`")
    files = sorted(outdir.glob("results*.jsonl"), key=lambda p: (p.name != "results.jsonl", p.name))
    if not files:
        raise InputError(f"no results*.jsonl in {outdir}", hint="run `fleetgen generate` into this directory first")
    return files


def iter_results(outdir: Path, counts: ReadCounts | None = None) -> Iterator[ResultRow]:
    """Every result record once; a torn or corrupt line is counted and skipped, never fatal."""
    counts = counts if counts is not None else ReadCounts()
    # The (id, sample) pairs seen, in generate's done set (32-64 bytes an id, whatever its length):
    # a set of tuples cost several times that (BENCHMARKS.md, "export dedup").
    seen = DoneSet()
    counts.files = result_files(outdir)
    seen.reserve(_expected_rows(counts.files))  # sized once: growing it rehashes every slot each time
    for path in counts.files:
        with open(path, "rb") as f:
            for line in f:
                if not line.strip():
                    continue
                try:
                    rec = orjson.loads(line)
                except orjson.JSONDecodeError:
                    counts.corrupt_lines += 1
                    continue
                if not isinstance(rec, dict) or not isinstance(rec.get("messages"), list):
                    counts.corrupt_lines += 1
                    continue
                try:
                    sample = int(rec.get("sample") or 0)
                except (TypeError, ValueError):
                    sample = -1
                if sample < 0:
                    counts.corrupt_lines += 1  # generate writes samples 0, 1, ...: not one of its rows
                    continue
                if not seen.add(str(rec.get("id")), sample):
                    counts.duplicates += 1
                    continue
                yield rec


def _expected_rows(files: list[Path], sample_bytes: int = 1 << 18) -> int:
    """About how many lines the files hold: their size over the mean line length of the first file's start.

    Capped at one line per 64 bytes (no result line is shorter), so a short start cannot oversize the table.
    """
    total = sum(p.stat().st_size for p in files)
    with open(files[0], "rb") as f:
        head = f.read(sample_bytes)
    lines = head.count(b"\n")
    if not lines:
        return total // sample_bytes
    return min(total * lines // len(head), total // 64)


def error_files(outdir: Path) -> list[Path]:
    """errors.jsonl and each shard's errors.shard-i-of-N.jsonl
    (archived errors*.retried-N.jsonl were retried: not these)."""
    from fleetgen.rows.files import ERROR_FILES

    outdir = Path(outdir)
    if not outdir.is_dir():
        return []
    return sorted(
        (p for p in outdir.iterdir() if ERROR_FILES.match(p.name)), key=lambda p: (p.name != "errors.jsonl", p.name)
    )


def iter_errors(outdir: Path) -> Iterator[ErrorRow]:
    """Records of errors.jsonl, and of every shard's errors file: one output, however many processes wrote it."""
    for path in error_files(outdir):
        with open(path, "rb") as f:
            for line in f:
                if line.strip():
                    try:
                        yield orjson.loads(line)
                    except orjson.JSONDecodeError:
                        continue


def job_reasoning(outdir: Path) -> str | None:
    """The reasoning policy job.json records for the run (save/strip/off); None when it cannot say.

    Rows record it in their own `sampling` (generate/config/profiles.py row_sampling); rows of runs with
    sampling profiles written before that did not, and are read with this one.
    """
    try:
        job = orjson.loads((Path(outdir) / "job.json").read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    value = ((job.get("sampling") or {}) if isinstance(job, dict) else {}).get("reasoning")
    return value if isinstance(value, str) else None


def reasoning_policy(rec: dict[str, Any], job: str | None) -> str | None:
    """The generate reasoning policy of one row: its own `sampling.reasoning`, else the job's."""
    value = (rec.get("sampling") or {}).get("reasoning")
    return value if isinstance(value, str) else job


def row_id(rec: dict[str, Any]) -> str:
    """The stable id of one exported row: the prompt id and the sample index."""
    return f"{rec['id']}#{rec.get('sample', 0)}"


def assistant_turns(rec: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in rec["messages"] if m.get("role") == "assistant"]


def finish_reasons(rec: dict[str, Any]) -> list[str | None]:
    fr = rec.get("finish_reason")
    if isinstance(fr, list):
        return fr
    return [fr]


def has_think_marker(text: str | None) -> bool:
    if not text:
        return False
    low = text.lower()
    return any(m in low for m in THINK_MARKERS)


def domain_of(rec: dict[str, Any]) -> str:
    meta = rec.get("meta") or {}
    return str(meta.get("domain") or "unknown")
