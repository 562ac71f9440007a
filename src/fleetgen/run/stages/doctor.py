"""The doctor stage: check the environment first and stop on a failed check."""

from __future__ import annotations

from pathlib import Path

from fleetgen.atomic import write_atomic
from fleetgen.errors import FleetgenError
from fleetgen.run.stage import Done, Stage


class DoctorStage(Stage):
    name = "doctor"
    gate = True  # the fleet must not start before the environment passed

    def section(self) -> object:
        return self.ctx.job.doctor.model_dump(mode="json")

    def outputs(self) -> list[Path]:
        return [self.ctx.workdir / "doctor.json"]

    async def run(self) -> Done:
        from fleetgen.doctor import run_doctor

        report = run_doctor(self.ctx.job.doctor)
        path = self.ctx.workdir / "doctor.json"
        write_atomic(path, report.model_dump_json(indent=2))
        if report.failed:
            raise FleetgenError(
                "doctor: " + "; ".join(f"{c.id}: {c.summary}" for c in report.failed),
                hint=f"read {path}; `fleetgen doctor --fix DIR` writes the fix",
            )
        return Done(f"{len(report.checks)} checks, none failed")
