"""fleetgen: regenerate synthetic datasets with a target model on a fleet of inference servers.

Each stage is a typed config plus one entry point; the `fleetgen` command is a thin layer over them.
`fleetgen.generate.generate` and `fleetgen.export.export` stay in their packages (same names as the packages).
Names load on first use: `fleetgen generate` must not pay for the mix and report stages' imports.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from fleetgen.version import __version__

# public name -> the module that defines it
_EXPORTS = {
    "DoctorConfig": "fleetgen.doctor",
    "run_doctor": "fleetgen.doctor",
    "FleetgenError": "fleetgen.errors",
    "ExportConfig": "fleetgen.export",
    "FleetConfig": "fleetgen.fleet",
    "down": "fleetgen.fleet",
    "fleet_status": "fleetgen.fleet",
    "up": "fleetgen.fleet",
    "GenerateConfig": "fleetgen.generate",
    "MixRecipe": "fleetgen.mix",
    "build_mix": "fleetgen.mix",
    "PromptRecord": "fleetgen.rows.prompt",
    "build_report": "fleetgen.report",
    "JobConfig": "fleetgen.run",
    "load_job": "fleetgen.run",
    "run_job": "fleetgen.run",
}

__all__ = sorted([*_EXPORTS, "__version__"])

if TYPE_CHECKING:
    from fleetgen.doctor import DoctorConfig, run_doctor
    from fleetgen.errors import FleetgenError
    from fleetgen.export import ExportConfig
    from fleetgen.fleet import FleetConfig, down, fleet_status, up
    from fleetgen.generate import GenerateConfig
    from fleetgen.mix import MixRecipe, build_mix
    from fleetgen.report import build_report
    from fleetgen.rows.prompt import PromptRecord
    from fleetgen.run import JobConfig, load_job, run_job


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'fleetgen' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
