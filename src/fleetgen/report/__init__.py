"""`fleetgen report`: a person-readable report of a generate run, in Markdown (and HTML) with PNG charts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleetgen._lazy import lazy_exports

# public name -> the module defining it; loaded on first use (see fleetgen._lazy)
_EXPORTS = {
    "Run": "fleetgen.report.data",
    "build_report": "fleetgen.report.build",
    "load_run": "fleetgen.report.data",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from fleetgen.report.build import build_report
    from fleetgen.report.data import Run, load_run

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
