"""`fleetgen capture`: the target's hidden states at a drafter's layers over each row's recorded ids, exactly once."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleetgen._lazy import lazy_exports

# public name -> the module defining it; loaded on first use (see fleetgen._lazy)
_EXPORTS = {
    "CaptureConfig": "fleetgen.capture.config",
    "CaptureSummary": "fleetgen.capture.run",
    "capture": "fleetgen.capture.run",
    "capture_engine_args": "fleetgen.capture.fleet_args",
    "resolve_layers": "fleetgen.capture.layers",
    "write_specforge": "fleetgen.capture.specforge",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from fleetgen.capture.config import CaptureConfig
    from fleetgen.capture.fleet_args import capture_engine_args
    from fleetgen.capture.layers import resolve_layers
    from fleetgen.capture.run import CaptureSummary, capture
    from fleetgen.capture.specforge import write_specforge

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
