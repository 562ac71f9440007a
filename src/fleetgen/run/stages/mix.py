"""The mix stage: build the prompt set the generate stage reads (Context.prompts)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from fleetgen.run.stage import Done, Stage


class MixStage(Stage):
    name = "mix"

    def section(self) -> object:
        return self.ctx.job.mix.model_dump(mode="json")

    def outputs(self) -> list[Path]:
        return [self.ctx.prompts]

    async def run(self) -> Done:
        from fleetgen.mix import build_mix

        prompts = self.ctx.prompts
        summary = await asyncio.to_thread(
            build_mix,
            self.ctx.job.mix,
            prompts,
            self.ctx.workdir / "mix-report",
            log=lambda m: self.ctx.say("mix", "info", m),
        )
        return Done(f"{summary.rows_written} prompts -> {prompts}", {"rows": summary.rows_written})
