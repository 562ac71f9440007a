"""Which jobs drive a fleet: each running `generate` keeps a small progress file in the fleet's state dir.

`status` reads these files, never a job's journal: the job writes its own counters every few seconds,
and removes its file when it ends. A file whose process is gone is a job that died (kill -9, power loss).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from fleetgen.atomic import write_atomic
from fleetgen.fleet.process import is_alive

JOBS_DIR = "jobs"


class FrozenReplica(BaseModel):
    """A replica the job declared frozen: its requests were re-sent; it takes no work until a probe answers."""

    now: bool = Field(description="Frozen now (no work until a probe answers); false once it rejoined.")
    count: int = Field(description="Times it was declared frozen in this run.")
    since: float = Field(description="Unix time it was last declared frozen.")
    rejoined_at: float | None = Field(None, description="Unix time it rejoined after that, if it did.")


class JobProgress(BaseModel):
    """What a job driving the fleet reports about itself; no API key, no prompts."""

    pid: int
    create_time: float = Field(description="The job process's start time; tells a live job from a reused pid.")
    boot_time: float | None = Field(
        None, description="The host's boot time as create_time was read (see fleet/process.py)."
    )
    output_dir: str
    updated_at: float = Field(description="Unix time of this report.")
    total: int = Field(description="(prompt id, sample) pairs in the job.")
    done: int = Field(description="Pairs recorded, by this run and earlier ones.")
    ok: int
    errors: int
    resumed: int
    samples_per_s: float = Field(description="Pairs recorded per second, averaged over this run.")
    output_tokens_per_s: float
    eta_s: float | None = Field(None, description="Seconds to the end at that rate; None before the first pair.")
    metrics_url: str | None = Field(None, description="The job's Prometheus page, when it serves one.")
    concurrency: str | None = Field(None, description="auto (limits follow the engines' load) or fixed.")
    limits: dict[str, int] = Field(
        default_factory=dict, description="Requests the job keeps in flight at most, per replica endpoint, now."
    )
    stalled: dict[str, int] = Field(
        default_factory=dict,
        description="Requests cancelled and re-sent after no answer within the bound the replica's pace sets, per "
        "endpoint.",
    )
    frozen: dict[str, FrozenReplica] = Field(
        default_factory=dict,
        description="Per endpoint declared frozen by the fleet's pace in this run (generate/dispatch/freeze.py).",
    )


def job_path(state_dir: Path, pid: int) -> Path:
    return Path(state_dir) / JOBS_DIR / f"{pid}.json"


def write_job(state_dir: Path, progress: JobProgress) -> None:
    """Replace the job's file atomically, so `status` never reads half of one."""
    path = job_path(state_dir, progress.pid)
    path.parent.mkdir(exist_ok=True)
    # Not fsynced: rewritten every few seconds from the job's event
    # loop, removed when it ends; a crash leaves it stale anyway.
    write_atomic(path, progress.model_dump_json(), durable=False)


def remove_job(state_dir: Path, pid: int) -> None:
    job_path(state_dir, pid).unlink(missing_ok=True)


def read_jobs(state_dir: Path) -> list[tuple[JobProgress, bool]]:
    """Every job file with whether its process still runs; unreadable files are skipped."""
    found = []
    for path in sorted((Path(state_dir) / JOBS_DIR).glob("*.json")):
        try:
            job = JobProgress.model_validate_json(path.read_bytes())
        except (OSError, ValidationError):
            continue
        found.append((job, _running(job)))
    return found


def _running(job: JobProgress) -> bool:
    return is_alive(job.pid, job.create_time, job.boot_time)
