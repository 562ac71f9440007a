"""`fleetgen run`: the whole pipeline from one job file."""

from fleetgen.run.config import JobConfig, load_job
from fleetgen.run.pipeline import RunEvent, RunSummary, run_job

__all__ = ["JobConfig", "RunEvent", "RunSummary", "load_job", "run_job"]
