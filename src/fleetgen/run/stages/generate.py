"""The generate stage: start the fleet (or reuse a healthy one), generate under its supervisor, stop the fleet.

The stage is keyed on the job's identity as configured (GenerateConfig.declared_identity) and the
number of samples, never on fields that only say how rows are made: editing `concurrency` of an
interrupted job re-runs the stage, which continues the rows already there. Whether the directory's
rows are this job's is generate's own check of job.json, the one identity: when it refuses, the
earlier output is moved aside and the stage starts anew.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from fleetgen.atomic import write_atomic
from fleetgen.errors import FleetError, FleetgenError, ResumeMismatchError
from fleetgen.fleet import down, fleet_status, read_state, up
from fleetgen.fleet.replica_plan import api_key_of
from fleetgen.fleet.supervisor import Supervisor, SupervisorEvent
from fleetgen.generate import GenerateConfig, Stats, stamped_fingerprint
from fleetgen.generate import run as generate_run
from fleetgen.rows.stats_file import describe_freezes, describe_silence
from fleetgen.run.book import fingerprint
from fleetgen.run.stage import Done, Stage


class GenerateStage(Stage):
    name = "generate"

    def section(self) -> object:
        gen = self.ctx.job.generate
        return {"identity": gen.declared_identity(), "model": gen.model, "samples": gen.samples}

    async def fingerprint(self) -> str:
        prompts = self.ctx.fingerprints.get("mix")  # the mix's own fingerprint stands for its output
        if prompts is None:
            prompts, _rows = await asyncio.to_thread(stamped_fingerprint, self.ctx.prompts, self.ctx.results_dir)
        fleet = self.ctx.job.fleet
        model = fleet.model_dump(mode="json", include={"engine", "model", "served_model_name"}) if fleet else None
        return fingerprint(self.section(), prompts, json.dumps(model))

    def outputs(self) -> list[Path]:
        return [self.ctx.results_dir]

    _early: asyncio.Task[Path] | None = None

    def head_start(self) -> bool:
        """Start the fleet now: its replicas load while the mix is built."""
        if self.ctx.job.fleet is None:
            return False
        self._early = asyncio.ensure_future(self._fleet_up())
        return True

    async def drop_head_start(self) -> None:
        early, self._early = self._early, None
        if early is None:
            return
        early.cancel()  # `up` stops what it started and clears the state when cancelled mid-way
        try:
            state_dir = await early
        except (asyncio.CancelledError, Exception):
            return
        if not self.ctx.keep_fleet:
            n = await asyncio.to_thread(down, state_dir)
            self.ctx.say("fleet", "info", f"fleet stopped ({n} processes)")

    async def run(self) -> Done:
        ctx, outdir = self.ctx, self.ctx.results_dir
        early, self._early = self._early, None
        state_dir = (await early if early is not None else await self._fleet_up()) if ctx.job.fleet else None
        section = ctx.job.generate
        config = GenerateConfig.model_validate(
            {**section.model_dump(), "prompts": ctx.prompts, "output_dir": outdir, "fleet_state": state_dir}
        )
        try:
            try:
                stats = await self._supervised(config, state_dir)
            except ResumeMismatchError as e:  # generate's check of job.json: another job's rows are there
                moved = outdir.with_name(f"{outdir.name}.replaced-{int(time.time())}")
                outdir.rename(moved)
                ctx.say("generate", "info", f"the job changed ({e.message}): earlier results kept in {moved}")
                stats = await self._supervised(config, state_dir)
        finally:
            if state_dir is not None and not ctx.keep_fleet:
                n = await asyncio.to_thread(down, state_dir)
                ctx.say("fleet", "info", f"fleet stopped ({n} processes)")
        for r in stats.replicas:
            if (gone := stats.stopped_answering(r)) is not None:
                ctx.say(
                    "generate", "info", f"replica {r.index} ({r.endpoint}) stopped answering {describe_silence(gone)}"
                )
            if r.freeze_count:
                ctx.say("generate", "info", f"replica {r.index} ({r.endpoint}) {describe_freezes(stats.frozen(r))}")
        if stats.interrupted or stats.done < stats.total:
            raise FleetgenError(
                f"generate stopped before the end ({stats.done}/{stats.total} done: "
                f"{stats.stopped_reason or 'interrupted'})",
                hint="run again with --resume: finished rows are kept and only the rest is sent",
            )
        return Done(f"{stats.ok} ok, {stats.errors} errors -> {outdir}", {"ok": stats.ok, "errors": stats.errors})

    async def _fleet_up(self) -> Path:
        ctx = self.ctx
        cfg = ctx.job.fleet.model_copy(update={"state_dir": ctx.workdir / "fleet"})
        state_dir = Path(cfg.state_dir)
        try:
            read_state(state_dir)
            _, statuses = await fleet_status(state_dir, api_key=api_key_of(cfg), sample_s=0)
            if statuses and all(s.healthy for s in statuses):
                ctx.say("fleet", "skip", f"reusing the running fleet in {state_dir}")
                return state_dir
            ctx.say("fleet", "info", "an earlier fleet is not healthy: stopping it")
            await asyncio.to_thread(down, state_dir)
        except FleetError:
            pass
        ctx.say("fleet", "start", f"{cfg.replicas or 'auto'} replica(s) of {cfg.model} ({cfg.engine})")

        seen: dict[int, str] = {}

        def on_progress(p) -> None:  # a line per phase a replica enters: the start takes a minute or more
            if seen.get(p.index) != p.phase.value:
                seen[p.index] = p.phase.value
                ctx.say("fleet", "info", f"replica {p.index}: {p.phase.value} ({p.elapsed_s:.0f} s)")

        state = await up(cfg, on_progress=on_progress)
        ctx.say("fleet", "done", f"{len(state.replicas)} replica(s) ready")
        if ctx.metrics is not None:
            ctx.metrics.run.stage = "generate"
        return state_dir

    async def _supervised(self, config: GenerateConfig, state_dir: Path | None) -> Stats:
        ctx = self.ctx
        if state_dir is None or not ctx.job.supervise:
            return await generate_run(config, on_progress=ctx.on_progress, metrics=ctx.metrics)

        def on_sup(e: SupervisorEvent) -> None:
            ctx.say("supervisor", "info", f"replica {e.index}: {e.kind} {e.detail}")

        async with Supervisor(
            state_dir,
            api_key=api_key_of(ctx.job.fleet),
            max_restarts=ctx.job.max_restarts,
            hang_timeout_s=ctx.job.hang_timeout_s,
            on_event=on_sup,
        ) as sup:
            if ctx.metrics is not None:
                ctx.metrics.run.restarts = lambda: sup.restarts
            stats = await generate_run(config, on_progress=ctx.on_progress, metrics=ctx.metrics)
            if ctx.keep_fleet and not stats.interrupted:  # a restart under way is finished, not abandoned
                stopped = await sup.complete_restarts()
                total = len(read_state(state_dir).replicas)
                lacking = f"; not running: replica(s) {', '.join(map(str, stopped))}" if stopped else ""
                ctx.say("fleet", "info", f"kept: {total - len(stopped)} of {total} replica(s) running{lacking}")
        ctx.summary.restarts = sup.restarts
        _record_restarts(Path(config.output_dir), sup)
        return stats


def _record_restarts(outdir: Path, sup: Supervisor) -> None:
    """Put the supervisor's restarts into generate's stats.json, where a person looks for them."""
    path = outdir / "stats.json"
    try:
        stats = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return
    stats["replica_restarts"] = {str(k): v for k, v in sup.restarts.items()}
    stats["supervisor_events"] = [
        {"replica": e.index, "kind": e.kind, "detail": e.detail, "at": e.at} for e in sup.events
    ]
    write_atomic(path, json.dumps(stats, indent=2))
