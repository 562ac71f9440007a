"""Captures driving a fleet: a running `fleetgen capture --fleet STATE` keeps a small progress file in the state dir.

As with generate's jobs (jobs.py), `status` reads these files, never the capture's journal (a million
lines): the capture writes its own counters every few seconds from its progress callback and removes
the file when it ends. A file whose process is gone is a capture that died (kill -9, power loss).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from fleetgen.atomic import write_atomic
from fleetgen.fleet.process import is_alive, started

CAPTURES_DIR = "captures"
PUBLISH_EVERY_S = 2.0


class CaptureJobProgress(BaseModel):
    """What a capture reports about itself: rows, tokens and bytes of this run, and the rate."""

    pid: int
    create_time: float = Field(description="The capture process's start time; tells a live one from a reused pid.")
    boot_time: float | None = Field(None, description="The host's boot time as create_time was read.")
    output_dir: str
    updated_at: float = Field(description="Unix time of this report.")
    started_at: float = Field(description="Unix time this run started.")
    already: int = Field(0, description="(id, sample) captured by earlier runs, skipped.")
    captured: int = Field(0, description="(id, sample) this run captured.")
    failed: int = Field(0, description="Records this run could not capture (capture_errors.jsonl; retried later).")
    from_text: int = Field(0, description="Captured records whose ids were re-encoded from text (none recorded).")
    tokens: int = Field(0, description="Tokens this run captured.")
    bytes: int = Field(0, description="Bytes of the hidden-state files this run wrote.")
    planned_tokens: int = Field(0, description="Tokens left to capture when this run started (from generate's usage).")
    stopped: str | None = Field(None, description="Why the run stopped early (the disk margin), if it did.")

    @property
    def elapsed_s(self) -> float:
        return max(0.0, self.updated_at - self.started_at)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def bytes_per_s(self) -> float:
        return self.bytes / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def eta_s(self) -> float | None:
        """Seconds to the planned tokens at this run's rate; None before the first row."""
        rate = self.tokens_per_s
        return max(0.0, self.planned_tokens - self.tokens) / rate if rate > 0 else None


def capture_job_path(state_dir: Path, pid: int) -> Path:
    return Path(state_dir) / CAPTURES_DIR / f"{pid}.json"


class CaptureProgressFile:
    """The runner's progress callback: writes the capture's file at most every PUBLISH_EVERY_S seconds.

    Takes the runner's summary as it comes (read by attribute: captured, failed, from_text, tokens, bytes,
    already, planned_tokens, stopped), so the fleet package needs nothing from capture.
    """

    def __init__(self, state_dir: Path, output_dir: Path, *, clock: Callable[[], float] = time.time) -> None:
        self.state_dir = Path(state_dir)
        self.output_dir = str(Path(output_dir).resolve())
        self.clock = clock
        self.pid = os.getpid()
        self.create_time, self.boot_time = started(self.pid)
        self.started_at = clock()
        self._last: float | None = None

    def __call__(self, summary: Any, *, force: bool = False) -> None:
        now = self.clock()
        if not force and self._last is not None and now - self._last < PUBLISH_EVERY_S:
            return
        self._last = now
        progress = CaptureJobProgress(
            pid=self.pid,
            create_time=self.create_time,
            boot_time=self.boot_time,
            output_dir=self.output_dir,
            updated_at=now,
            started_at=self.started_at,
            **{k: getattr(summary, k) for k in ("already", "captured", "failed", "from_text", "tokens", "bytes")},
            planned_tokens=summary.planned_tokens,
            stopped=summary.stopped,
        )
        path = capture_job_path(self.state_dir, self.pid)
        try:
            path.parent.mkdir(exist_ok=True)
            write_atomic(path, progress.model_dump_json(), durable=False)  # rewritten every few seconds
        except OSError:
            pass  # a status view must never stop the capture

    def close(self) -> None:
        capture_job_path(self.state_dir, self.pid).unlink(missing_ok=True)


def read_capture_jobs(state_dir: Path) -> list[tuple[CaptureJobProgress, bool]]:
    """Every capture's file with whether its process still runs; unreadable files are skipped."""
    found = []
    for path in sorted((Path(state_dir) / CAPTURES_DIR).glob("*.json")):
        try:
            job = CaptureJobProgress.model_validate_json(path.read_bytes())
        except (OSError, ValidationError):
            continue
        found.append((job, is_alive(job.pid, job.create_time, job.boot_time)))
    return found
