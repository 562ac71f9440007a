"""`fleetgen run`: the whole pipeline from one job file."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleetgen._lazy import lazy_exports

# public name -> the module defining it; loaded on first use (see fleetgen._lazy)
_EXPORTS = {
    "JobConfig": "fleetgen.run.config",
    "RunEvent": "fleetgen.run.stage",
    "RunSummary": "fleetgen.run.stage",
    "load_job": "fleetgen.run.config",
    "run_job": "fleetgen.run.pipeline",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from fleetgen.run.config import JobConfig, load_job
    from fleetgen.run.pipeline import run_job
    from fleetgen.run.stage import RunEvent, RunSummary

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
