"""fleetgen: regenerate synthetic datasets with a target model on a fleet of inference servers.

Each stage is a typed config plus one entry point; the `fleetgen` command is a thin layer over them.
`fleetgen.generate.generate` and `fleetgen.export.export` stay in their packages (same names as the packages).
"""

from fleetgen.doctor import DoctorConfig, run_doctor
from fleetgen.errors import FleetgenError
from fleetgen.export import ExportConfig
from fleetgen.fleet import FleetConfig, down, fleet_status, up
from fleetgen.generate import GenerateConfig
from fleetgen.mix import MixRecipe, build_mix
from fleetgen.records import PromptRecord
from fleetgen.report import build_report
from fleetgen.run import JobConfig, load_job, run_job

__version__ = "0.1.0"

__all__ = [
    "DoctorConfig",
    "ExportConfig",
    "FleetConfig",
    "FleetgenError",
    "GenerateConfig",
    "JobConfig",
    "MixRecipe",
    "PromptRecord",
    "__version__",
    "build_mix",
    "build_report",
    "down",
    "fleet_status",
    "load_job",
    "run_doctor",
    "run_job",
    "up",
]
