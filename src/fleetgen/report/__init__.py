"""`fleetgen report`: a person-readable report of a generate run, in Markdown (and HTML) with PNG charts."""

from fleetgen.report.build import build_report
from fleetgen.report.data import Run, load_run

__all__ = ["Run", "build_report", "load_run"]
