"""The report's hidden-states section: each capture of this output, its rows, bytes and throughput, per run.

Counts come from the capture's journal (captured.jsonl: a line per (id, sample) whose files are whole),
never from the files present: a file without its line is not captured. Rows whose ids were re-encoded
from text (the row recorded none) are counted apart: their hidden states are over the canonical
tokenization, not the sampled one.
"""

from __future__ import annotations

import os
from pathlib import Path

from fleetgen.capture.storage import format_bytes
from fleetgen.report.document import Document, pct
from fleetgen.report.runs import when
from fleetgen.rows.capture_journal import CaptureProgress


def _leftovers(path: Path, journaled: int) -> tuple[int, int]:
    """(hs_* files beyond the journal's, temporaries) in `path`: names only, no stat (a job has 10^5-10^6 files)."""
    if not path.is_dir():
        return 0, 0
    with os.scandir(path) as it:
        names = [e.name for e in it]
    files = sum(n.startswith("hs_") and n.endswith(".safetensors") for n in names)
    return max(0, files - journaled), sum(n.endswith(".tmp") for n in names)


def _rate(n: float, wall: float, unit: str = "") -> str:
    return f"{n / wall:,.1f}{unit}" if wall > 0 else "-"


def capture_section(doc: Document, captures: list[CaptureProgress], result_pairs: int) -> None:
    """A table per capture and one of its runs; nothing when this output has no capture."""
    if not captures:
        return
    doc.heading("Hidden states")
    doc.text(
        f"Each capture of this output's result rows ({result_pairs} (id, sample) pairs). Counts: every line of "
        "captured.jsonl (a row counts once its files are whole); bytes: the files' sizes as journaled; throughput: "
        "over the capture runs' wall time (runs.jsonl; a run killed without an end counts to its last row)."
    )
    for c in captures:
        ident = c.identity
        layers = ",".join(str(k) for k in ident.get("layers") or [])
        wall = c.wall_s
        killed = sum(r.ended_at is None for r in c.runs)
        rows: list[list[object]] = [
            ["output", f"`{c.out}`"],
            ["model", ident.get("model", "-")],
            ["layers", f"{ident.get('preset', '-')}: {layers}" if layers else "-"],
            [
                "dtype, hidden size, bytes a token",
                f"{ident.get('dtype', '-')}, {ident.get('hidden_size', '-')}, {ident.get('bytes_per_token', '-')}",
            ],
            ["backend", ident.get("backend", "-")],
            [
                "captured (id, sample) of the result rows",
                f"{c.rows} of {result_pairs} ({pct(100 * c.rows / result_pairs)})" if result_pairs else c.rows,
            ],
            ["  with the ids the rows recorded", c.recorded],
            ["  with ids re-encoded from text (the row recorded none)", f"{c.from_text} ({c.from_text_tokens} tokens)"],
            ["hidden-state files (hs_*.safetensors)", c.files],
            ["tokens captured", c.tokens],
            ["bytes (journal)", f"{c.bytes} ({format_bytes(c.bytes)})"],
            [
                "files on disk beyond the journal, and temporaries (a kill's leftovers: the next run replaces them)",
                "{} and {}".format(*_leftovers(c.out / "hidden_states", c.files)),
            ],
            [
                f"wall time (s), the sum of the {len(c.runs)} runs" + (f" ({killed} killed)" if killed else ""),
                round(wall, 1),
            ],
            ["tokens / s", _rate(c.tokens, wall)],
            ["rows / s", _rate(c.rows, wall)],
            ["MB / s written", _rate(c.bytes / 1e6, wall)],
        ]
        for reason, n in c.failed.most_common():
            rows.append([f"not captured: {reason}", n])
        if c.torn_lines:
            rows.append(["torn journal lines skipped (a kill mid-append; never counted)", c.torn_lines])
        doc.table(["", "value"], rows)
        _runs_table(doc, c)


def _runs_table(doc: Document, c: CaptureProgress) -> None:
    if not c.runs:
        return
    table: list[list[object]] = []
    for i, r in enumerate(c.runs, 1):
        if r.ended_at is None:
            ended = "killed (no end event): counted to its last row"
        else:
            ended = f"stopped: {r.stopped}" if r.stopped else "finished"
        table.append(
            [
                i,
                when(r.started_at),
                when(r.ended_at) if r.ended_at is not None else "-",
                round(r.wall_s, 1),
                r.rows,
                r.tokens,
                _rate(r.tokens, r.wall_s),
                _rate(r.bytes / 1e6, r.wall_s),
                r.planned_tokens if r.planned_tokens is not None else "-",
                ended,
            ]
        )
    doc.table(
        [
            "run",
            "start (UTC)",
            "end (UTC)",
            "wall (s)",
            "rows",
            "tokens",
            "tokens/s",
            "MB/s",
            "tokens planned",
            "how it ended",
        ],
        table,
    )
