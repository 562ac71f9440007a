"""The runs of an output directory as the report counts them: each run's span, rows and tokens, and their sum.

runs.jsonl (rows/runs.py) lists each generate process's start and end. Shard processes of one
`generate --shards N` overlap in time and are one run here; runs one after another (an interrupted run
and its resumes) are separate. Each result row belongs to the run whose span holds the row's start
(`timing.started_at`); a row outside every span (an output written before runs.jsonl existed, or a
run whose start line could not be written) is counted as from an unrecorded run. So the per-run rows
add up to the results, whatever happened between the runs.
"""

from __future__ import annotations

import datetime
from bisect import bisect_right
from dataclasses import dataclass, field

from fleetgen.report.data import Row, Run
from fleetgen.rows.runs import RunRecord


@dataclass
class Span:
    """One run: the generate processes that ran at the same time, and the rows they made."""

    index: int  # 1-based, in time order
    records: list[RunRecord]
    started_at: float
    ended_at: float | None  # the last process's recorded end; None when one of them has none (killed)
    bound: float = float("inf")  # rows started after this belong to no process of the run
    rows: list[Row] = field(default_factory=list)

    @property
    def killed(self) -> bool:
        """Some process of the run left no end line (kill -9, power loss, OOM)."""
        return self.ended_at is None

    @property
    def last_row_end(self) -> float | None:
        ends = [r.ended_at for r in self.rows if r.ended_at is not None]
        return max(ends) if ends else None

    @property
    def end(self) -> float:
        """Its end: the recorded one, else (killed) its last row's completion, else its start."""
        if self.ended_at is not None:
            return self.ended_at
        return self.last_row_end or self.started_at

    @property
    def wall_s(self) -> float:
        """Its wall time: the process's own measure for a single process, else the span end - start."""
        if len(self.records) == 1 and self.records[0].wall_s is not None:
            return self.records[0].wall_s
        return max(0.0, self.end - self.started_at)

    @property
    def completion_tokens(self) -> int:
        return sum(r.completion_tokens for r in self.rows)

    @property
    def outcome(self) -> str:
        """How it ended, in a few words."""
        if self.killed:
            return "killed: no end recorded (its end here is its last row's)"
        reasons = {str(r.stats.get("stopped_reason") or "") for r in self.records if r.stats.get("interrupted")}
        if reasons:
            return "interrupted" + (f" ({', '.join(sorted(x for x in reasons if x))})" if any(reasons) else "")
        return "finished"

    @property
    def jobs(self) -> list[str]:
        return sorted({r.job for r in self.records if r.job})


def _bounds(records: list[RunRecord]) -> dict[str, float]:
    """How long each process may have run: its end, or (killed) until the next process on its journal started.

    One journal (the whole job's, or a shard's) has one writer at a time (the lease), so the next
    process on it started after a killed one was gone.
    """
    by_journal: dict[str, list[RunRecord]] = {}
    for r in sorted(records, key=lambda r: r.started_at):
        by_journal.setdefault(r.shard, []).append(r)
    out: dict[str, float] = {}
    for lst in by_journal.values():
        for a, b in zip(lst, [*lst[1:], None]):
            out[a.run] = a.ended_at if a.ended_at is not None else (b.started_at if b is not None else float("inf"))
    return out


def spans(records: list[RunRecord]) -> list[Span]:
    """Records grouped into runs: processes whose times overlap (the shards of one command) are one run."""
    bounds = _bounds(records)
    out: list[Span] = []
    for rec in sorted(records, key=lambda r: r.started_at):
        cur = out[-1] if out else None
        if cur is not None and rec.started_at < cur.bound:
            cur.records.append(rec)
            cur.bound = max(cur.bound, bounds[rec.run])
            ends = [r.ended_at for r in cur.records]
            cur.ended_at = None if None in ends else max(e for e in ends if e is not None)
            continue
        out.append(Span(len(out) + 1, [rec], rec.started_at, rec.ended_at, bound=bounds[rec.run]))
    return out


def attribute(run: Run) -> tuple[list[Span], list[Row]]:
    """The runs of `run`, each with its rows, and the rows of no recorded run."""
    out = spans(run.runs)
    if not out:
        return [], list(run.rows)
    starts = [s.started_at for s in out]
    unrecorded: list[Row] = []
    for row in run.rows:
        i = bisect_right(starts, row.started_at) - 1 if row.started_at is not None else -1
        if i < 0 or row.started_at > out[i].bound:
            unrecorded.append(row)  # before the first recorded run, or between runs: a run that left no start line
            continue
        out[i].rows.append(row)
    return out, unrecorded


def when(ts: float | None) -> str:
    """A unix time as UTC to the second, for the report's tables."""
    if ts is None:
        return "-"
    return datetime.datetime.fromtimestamp(ts, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")
