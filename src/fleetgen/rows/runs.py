"""Every run an output directory has seen, so a report after any number of resumes can add them up.

stats.json holds the last run's counters only: after an interrupted run and a resume it says the
resume's wall time and tokens, not the output's. So each `generate` process that opens the journal
appends two lines to runs.jsonl: one when it starts (a run id, when, host and pid, shard, the job
digest, the fleet's model path for a report's tokenizer) and one when it ends (when, and its stats.json as written). A
run killed before its end
(kill -9, power loss) leaves its start line alone; its rows are still in the results, which the
report counts from, attributing each row to the run whose span holds the row's start.

Shards of one job append side by side, under an flock as job-history.jsonl does (history.py); a
reader skips a torn last line.
"""

from __future__ import annotations

import fcntl
import logging
import os
import socket
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

RUNS = "runs.jsonl"
log = logging.getLogger("fleetgen.rows.runs")


@dataclass
class RunRecord:
    """One generate process's run: its start, and its end and stats when it got that far."""

    run: str
    started_at: float  # unix seconds
    host: str | None = None
    pid: int | None = None
    shard: str = ""  # the journal suffix ('' for the whole job, `.shard-i-of-N`)
    job: str | None = None  # digest of the job identity it ran with (history.py)
    model_path: str | None = None  # the fleet's model (or --tokenizer): where a report reads the tokenizer from
    ended_at: float | None = None
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def wall_s(self) -> float | None:
        """What its own clock measured (stats.json's wall_s), else end - start; None for a run killed mid-way."""
        if self.stats.get("wall_s") is not None:
            return float(self.stats["wall_s"])
        return None if self.ended_at is None else self.ended_at - self.started_at


def _append(outdir: Path, entry: dict[str, Any]) -> None:
    with open(Path(outdir) / RUNS, "ab") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # released when the file closes
        f.write(orjson.dumps(entry) + b"\n")
        f.flush()
        os.fsync(f.fileno())


def run_started(outdir: Path, *, shard: str = "", job: str | None = None, model_path: str | None = None) -> str | None:
    """Append this run's start; returns its id for run_ended (None if it could not be written: the run goes on)."""
    run = uuid.uuid4().hex[:12]
    try:
        _append(
            outdir,
            {
                "run": run,
                "event": "start",
                "at": round(time.time(), 3),
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "shard": shard,
                "job": job,
                "model_path": model_path,
            },
        )
    except OSError as e:  # the rows matter more than this record of them: the report then counts them as unrecorded
        log.warning(f"{RUNS} not written ({e}); the report will list this run's rows as from an unrecorded run")
        return None
    return run


def run_ended(outdir: Path, run: str | None, stats: dict[str, Any]) -> None:
    """Append the end of run `run` with its stats (what stats.json says of it)."""
    if run is None:
        return
    try:
        _append(outdir, {"run": run, "event": "end", "at": round(time.time(), 3), "stats": stats})
    except OSError as e:
        log.warning(f"{RUNS}: the end of run {run} not written ({e})")


def read_runs(outdir: Path) -> list[RunRecord]:
    """The runs recorded in `outdir`, by start time; [] when there is no runs.jsonl."""
    try:
        data = (Path(outdir) / RUNS).read_bytes()
    except OSError:
        return []
    runs: dict[str, RunRecord] = {}
    for line in data.splitlines():
        try:
            e = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue  # a torn last line (a crash mid-append)
        if not isinstance(e, dict) or not isinstance(e.get("run"), str) or not isinstance(e.get("at"), (int, float)):
            continue
        if e.get("event") == "start":
            runs.setdefault(
                e["run"],
                RunRecord(
                    e["run"],
                    float(e["at"]),
                    e.get("host"),
                    e.get("pid"),
                    str(e.get("shard") or ""),
                    e.get("job"),
                    e.get("model_path"),
                ),
            )
        elif e.get("event") == "end" and e["run"] in runs:
            runs[e["run"]].ended_at = float(e["at"])
            runs[e["run"]].stats = e.get("stats") if isinstance(e.get("stats"), dict) else {}
    return sorted(runs.values(), key=lambda r: r.started_at)
