"""`fleetgen run`: doctor -> mix -> up -> generate (supervised) -> down -> export -> report, resumable.

A loop over the job's stages (stages/, each a Stage of stage.py): one that is up to date is skipped,
any other runs and is recorded in WORKDIR/stages.json (book.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from fleetgen.errors import ConfigError
from fleetgen.run.book import StageBook
from fleetgen.run.config import JobConfig
from fleetgen.run.stage import Context, RunEvent, RunSummary, Stage
from fleetgen.run.stages import ORDER, CaptureStage, ExportStage, ReportStage

__all__ = ["Pipeline", "RunEvent", "RunSummary", "run_job"]

Callback = Callable[[RunEvent], None]


class Pipeline:
    """One job in one work directory. Stages talk through files, never through each other's internals."""

    def __init__(
        self,
        job: JobConfig,
        *,
        resume: bool,
        keep_fleet: bool,
        on_event: Callback | None = None,
        on_progress: Callable[[object], None] | None = None,
    ) -> None:
        self.job = job
        self.resume = resume
        self.on_event = on_event or (lambda e: None)
        self.ctx = Context(
            job, self.say, RunSummary(workdir=job.workdir), keep_fleet=keep_fleet, on_progress=on_progress
        )

    @property
    def summary(self) -> RunSummary:
        return self.ctx.summary

    def say(self, stage: str, kind: str, detail: str = "") -> None:
        if self.ctx.metrics is not None and kind == "start":
            self.ctx.metrics.run.stage = stage
        self.on_event(RunEvent(stage, kind, detail))

    def stages(self) -> list[Stage]:
        """The job's stages in order: those its file has a section for (generate always)."""
        sections = {
            "doctor": self.job.doctor,
            "mix": self.job.mix,
            "generate": self.job.generate,
            "export": self.job.export,
            "capture": self.job.capture,
            "report": self.job.report,
        }
        return [kind(self.ctx) for kind in ORDER if sections[kind.name] is not None]

    async def run(self) -> RunSummary:
        observe = self.job.generate.observe
        if observe.metrics_port is None:
            return await self._run()
        from fleetgen.metrics import MetricsServer  # prometheus_client only when asked for

        with MetricsServer(observe.metrics_host, observe.metrics_port, allow_remote=observe.metrics_allow_remote) as m:
            self.ctx.metrics = m
            self.say("metrics", "info", f"serving {m.url}")
            summary = await self._run()
            m.run.stage = "done"
            return summary

    async def _run(self) -> RunSummary:
        workdir = self.ctx.workdir
        workdir.mkdir(parents=True, exist_ok=True)
        book = StageBook(workdir)
        if book.done and not self.resume:
            raise ConfigError(
                f"{workdir} holds an earlier run ({', '.join(book.done)} done)",
                hint="pass --resume to continue it (finished stages are skipped), or set another workdir",
            )
        stages = self.stages()
        self._fill_summary(stages)
        early: list[Stage] = []
        launched = False
        try:
            for i, stage in enumerate(stages):
                fp = await stage.fingerprint()
                self.ctx.fingerprints[stage.name] = fp
                if book.is_current(stage.name, fp) and all(p.exists() for p in stage.outputs()):
                    self.summary.stages_skipped.append(stage.name)
                    self.say(stage.name, "skip", "up to date")
                    continue
                if book.changed(stage.name, fp):
                    dropped = book.invalidate_from(stage.name)
                    self.say(
                        stage.name, "invalidated", f"its config or inputs changed: re-running {', '.join(dropped)}"
                    )
                if not launched and not stage.gate:  # the first stage to run that no later one must wait for
                    launched = True
                    early = await self._head_starts(stages[i + 1 :], book)
                self.summary.stages_run.append(stage.name)
                self.say(stage.name, "start")
                done = await stage.run()
                book.mark(stage.name, fp, **done.facts)
                self.say(stage.name, "done", done.line)
        finally:
            for stage in early:  # began, then not used: a stage before failed, or this one turned out current
                await stage.drop_head_start()
        return self.summary

    async def _head_starts(self, later: list[Stage], book: StageBook) -> list[Stage]:
        """Give each of the `later` stages that will run its head start (stage.head_start), up to a gate that runs."""
        started: list[Stage] = []
        for stage in later:
            fp = await stage.fingerprint()
            self.ctx.fingerprints[stage.name] = fp
            runs = not (book.is_current(stage.name, fp) and all(p.exists() for p in stage.outputs()))
            if runs and stage.gate:
                # nothing after it may begin before it passes (the fleet must not start into a broken environment)
                break
            if runs and stage.head_start():
                started.append(stage)
        for stage in later:  # the loop computes them again, as each stage is reached
            self.ctx.fingerprints.pop(stage.name, None)
        return started

    def _fill_summary(self, stages: list[Stage]) -> None:
        """Where the job's files are, whether their stages run now or ran before."""
        s, ctx = self.summary, self.ctx
        s.prompts, s.results = ctx.prompts, ctx.results_dir / "results.jsonl"
        for stage in stages:
            if isinstance(stage, ExportStage):
                s.export = stage.config().output_paths()
            elif isinstance(stage, CaptureStage):
                s.capture = stage.outputs()[0].parent
            elif isinstance(stage, ReportStage):
                s.report = stage.outputs()[0]


def run_job(
    job: JobConfig,
    *,
    resume: bool = False,
    keep_fleet: bool = False,
    on_event: Callback | None = None,
    on_progress: Callable[[object], None] | None = None,
) -> RunSummary:
    """Run every configured stage of `job`; finished stages are skipped on resume."""
    return asyncio.run(
        Pipeline(job, resume=resume, keep_fleet=keep_fleet, on_event=on_event, on_progress=on_progress).run()
    )
