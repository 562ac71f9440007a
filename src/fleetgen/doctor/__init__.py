"""`fleetgen doctor`: diagnose the GPU/CUDA/engine environment and write the fix."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleetgen._lazy import lazy_exports

# public name -> the module defining it; loaded on first use (see fleetgen._lazy)
_EXPORTS = {
    "Check": "fleetgen.doctor.report",
    "DoctorConfig": "fleetgen.doctor.config",
    "DoctorReport": "fleetgen.doctor.report",
    "Fix": "fleetgen.doctor.report",
    "FixResult": "fleetgen.doctor.fix",
    "Host": "fleetgen.doctor.host",
    "OverlayPlan": "fleetgen.doctor.report",
    "SCHEMA_VERSION": "fleetgen.doctor.report",
    "Status": "fleetgen.doctor.report",
    "engine_args_for_replicas": "fleetgen.doctor.fix",
    "env_for_replicas": "fleetgen.doctor.fix",
    "run_doctor": "fleetgen.doctor.run",
    "write_fix": "fleetgen.doctor.fix",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from fleetgen.doctor.config import DoctorConfig
    from fleetgen.doctor.fix import FixResult, engine_args_for_replicas, env_for_replicas, write_fix
    from fleetgen.doctor.host import Host
    from fleetgen.doctor.report import SCHEMA_VERSION, Check, DoctorReport, Fix, OverlayPlan, Status
    from fleetgen.doctor.run import run_doctor

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
