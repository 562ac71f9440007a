"""`fleetgen doctor`: diagnose the GPU/CUDA/engine environment and write the fix."""

from fleetgen.doctor.config import DoctorConfig
from fleetgen.doctor.fix import FixResult, engine_args_for_replicas, env_for_replicas, write_fix
from fleetgen.doctor.host import Host
from fleetgen.doctor.report import SCHEMA_VERSION, Check, DoctorReport, Fix, OverlayPlan, Status
from fleetgen.doctor.run import run_doctor

__all__ = [
    "SCHEMA_VERSION",
    "Check",
    "DoctorConfig",
    "DoctorReport",
    "Fix",
    "FixResult",
    "Host",
    "OverlayPlan",
    "Status",
    "engine_args_for_replicas",
    "env_for_replicas",
    "run_doctor",
    "write_fix",
]
