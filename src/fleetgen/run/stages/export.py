"""The export stage: drafter-training data from the generate stage's results."""

from __future__ import annotations

from pathlib import Path

from fleetgen.run.stage import Done, Stage


class ExportStage(Stage):
    name = "export"
    reads = ("generate",)

    def section(self) -> object:
        return self.ctx.job.export.model_dump(mode="json")

    def config(self):
        """The ExportConfig of the job's export section: its output under WORKDIR, its input the generate stage's."""
        from fleetgen.export import ExportConfig

        section = self.ctx.job.export
        output = section.output if section.output.is_absolute() else self.ctx.workdir / section.output
        return ExportConfig.model_validate(
            {
                **section.model_dump(),
                "output": output,
                "overwrite": True,
                "results_dir": section.results_dir or self.ctx.results_dir,
            }
        )

    def outputs(self) -> list[Path]:
        return list(self.config().output_paths().values())

    async def run(self) -> Done:
        from fleetgen.export import export

        cfg = self.config()
        s = export(cfg)
        paths = ", ".join(str(p) for p in cfg.output_paths().values())
        return Done(f"{sum(s.written.values())} rows -> {paths}", {"written": dict(s.written)})
