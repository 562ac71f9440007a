"""`status`'s lines for the captures driving a fleet (fleet/capture_jobs.py), beside its generate jobs."""

from __future__ import annotations

import time
from pathlib import Path

from fleetgen.fleet.capture_jobs import CaptureJobProgress, read_capture_jobs


def _duration(s: float | None) -> str:
    if s is None:
        return "-"
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def capture_line(j: CaptureJobProgress, running: bool) -> str:
    """One line per capture: what it reported last (it rewrites its file every few seconds)."""
    share = f" ({100 * j.tokens / j.planned_tokens:.0f}% of the tokens planned)" if j.planned_tokens else ""
    line = (
        f"capture pid {j.pid} -> {j.output_dir}: {j.captured} rows this run{share}, {j.already} before, "
        f"{j.tokens_per_s:.0f} tok/s, {j.bytes_per_s / 1e6:.1f} MB/s, {j.bytes / 1e9:.2f} GB written, "
        f"ETA {_duration(j.eta_s)}, {j.failed} failed"
    )
    if j.from_text:
        line += f", {j.from_text} with ids from text"
    if j.stopped:
        line += f", [yellow]stopped: {j.stopped}[/]"
    if not running:
        line = f"[red]not running[/] (last report {_duration(time.time() - j.updated_at)} ago): " + line
    return line


def capture_status(state_dir: Path) -> tuple[list[str], list[dict]]:
    """(lines for the table view, objects for --json) of every capture the state dir knows."""
    jobs = read_capture_jobs(state_dir)
    rows = [
        {**j.model_dump(), "running": running, "tokens_per_s": j.tokens_per_s, "eta_s": j.eta_s} for j, running in jobs
    ]
    return [capture_line(j, running) for j, running in jobs], rows
