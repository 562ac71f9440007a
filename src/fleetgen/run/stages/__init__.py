"""The stages of `fleetgen run`, in the order they run; each is a Stage (run/stage.py) in a module of its own."""

from __future__ import annotations

from fleetgen.run.stages.capture import CaptureStage
from fleetgen.run.stages.doctor import DoctorStage
from fleetgen.run.stages.export import ExportStage
from fleetgen.run.stages.generate import GenerateStage
from fleetgen.run.stages.mix import MixStage
from fleetgen.run.stages.report import ReportStage

ORDER = (DoctorStage, MixStage, GenerateStage, ExportStage, CaptureStage, ReportStage)

__all__ = ["ORDER", "CaptureStage", "DoctorStage", "ExportStage", "GenerateStage", "MixStage", "ReportStage"]
