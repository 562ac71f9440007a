"""When the pipeline gives a stage its head start: beside the first stage that runs, never before a gate.

STAND-IN stages (they record what happens, nothing else): the real ones need an engine, and what is
checked here is only the order the pipeline calls them in. The real generate stage's head start (the
fleet starting while the mix is built) runs in tests/run/test_run_head_start.py.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from fleetgen.run.config import JobConfig
from fleetgen.run.pipeline import Pipeline
from fleetgen.run.stage import Done, Stage


class Recorded(Stage):
    """A stand-in stage: appends what the pipeline asks of it to `log`."""

    log: list[str] = []
    fails = False

    def section(self) -> object:
        return self.name

    def outputs(self) -> list[Path]:
        return [self.ctx.workdir / f"{self.name}.out"]

    async def run(self) -> Done:
        await asyncio.sleep(0)  # let anything begun early take a step
        self.log.append(f"{self.name} ran")
        if self.fails:
            raise RuntimeError(f"{self.name} failed")
        self.outputs()[0].write_text("x")
        return Done("ok")

    def head_start(self) -> bool:
        self.log.append(f"{self.name} head start")
        self.early = True
        return True

    async def drop_head_start(self) -> None:
        if getattr(self, "early", False):
            self.log.append(f"{self.name} head start dropped")


def stage(name: str, *, gate: bool = False, fails: bool = False) -> type[Recorded]:
    return type(name, (Recorded,), {"name": name, "gate": gate, "fails": fails})


def run(tmp_path: Path, kinds: list[type[Recorded]]) -> list[str]:
    log: list[str] = []
    for k in kinds:
        k.log = log
    job = JobConfig.model_validate(
        {
            "workdir": str(tmp_path),
            "generate": {"prompts": str(tmp_path / "p.jsonl"), "endpoints": ["http://127.0.0.1:1"]},
        }
    )
    pipeline = Pipeline(job, resume=True, keep_fleet=False)
    pipeline.stages = lambda: [k(pipeline.ctx) for k in kinds]  # type: ignore[method-assign]
    try:
        asyncio.run(pipeline.run())
    except RuntimeError:
        pass
    return log


def test_later_stages_begin_beside_the_first_that_runs(tmp_path):
    log = run(tmp_path, [stage("mix"), stage("generate"), stage("export")])
    assert log[:3] == ["generate head start", "export head start", "mix ran"]


def test_nothing_begins_before_a_gate_has_passed(tmp_path):
    log = run(tmp_path, [stage("doctor", gate=True), stage("mix"), stage("generate")])
    assert log[:3] == ["doctor ran", "generate head start", "mix ran"]


def test_a_head_start_is_dropped_when_a_stage_before_fails(tmp_path):
    log = run(tmp_path, [stage("mix", fails=True), stage("generate")])
    assert log == ["generate head start", "mix ran", "generate head start dropped"]


def test_no_head_start_where_nothing_runs_before(tmp_path):
    kinds = [stage("mix"), stage("generate")]
    run(tmp_path, kinds)
    assert run(tmp_path, kinds) == []  # all up to date
    (tmp_path / "generate.out").unlink()
    assert run(tmp_path, kinds) == ["generate ran"]  # the first to run: nothing before it to overlap with
