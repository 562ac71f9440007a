"""The report stage: report.md (and report.html) of the generate
stage's results, with the mix's report when there is one."""

from __future__ import annotations

from pathlib import Path

from fleetgen.run.book import fingerprint
from fleetgen.run.stage import Done, Stage


class ReportStage(Stage):
    name = "report"
    reads = ("generate",)

    def section(self) -> object:
        return self.ctx.job.report.model_dump(mode="json")

    async def fingerprint(self) -> str:
        """generate's and, where the job captures, capture's too: the report counts the hidden states."""
        upstream = [self.ctx.fingerprints[n] for n in ("generate", "capture") if n in self.ctx.fingerprints]
        return fingerprint(self.section(), *upstream)

    @property
    def dest(self) -> Path:
        return self.ctx.workdir / "report"

    def outputs(self) -> list[Path]:
        return [self.dest / "report.md"]

    async def run(self) -> Done:
        from fleetgen.report import build_report

        mix_report = self.ctx.workdir / "mix-report"
        build_report(
            self.ctx.results_dir,
            self.ctx.job.report.html,
            dest=self.dest,
            mix_report=mix_report if mix_report.exists() else None,
        )
        return Done(str(self.dest / "report.md"))
