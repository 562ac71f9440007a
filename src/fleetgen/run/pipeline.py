"""`fleetgen run`: doctor -> mix -> up -> generate (supervised) -> down -> export -> report, resumable."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from fleetgen.errors import ConfigError, FleetError, FleetgenError
from fleetgen.fleet import down, fleet_status, read_state, up
from fleetgen.fleet.replica_plan import api_key_of
from fleetgen.fleet.supervisor import Supervisor, SupervisorEvent
from fleetgen.generate import GenerateConfig
from fleetgen.generate import run as generate_run
from fleetgen.rows.stats_file import describe_silence
from fleetgen.generate.prompts.reader import fingerprint as prompts_fingerprint
from fleetgen.run.config import JobConfig
from fleetgen.run.stages import StageBook, fingerprint


@dataclass
class RunEvent:
    stage: str
    kind: str  # start, skip, done, invalidated, info
    detail: str = ""


@dataclass
class RunSummary:
    workdir: Path
    prompts: Path | None = None
    results: Path | None = None
    export: dict[str, Path] = field(default_factory=dict)
    report: Path | None = None
    restarts: dict[int, int] = field(default_factory=dict)
    stages_run: list[str] = field(default_factory=list)
    stages_skipped: list[str] = field(default_factory=list)


Callback = Callable[[RunEvent], None]
# Where a job is watched from, not what it makes: changing them must not re-run generate.
_WATCH_FIELDS = {"metrics_port", "metrics_host", "metrics_allow_remote"}


class Pipeline:
    """One job in one work directory. Stages talk through files, never through each other's internals."""

    def __init__(self, job: JobConfig, *, resume: bool, keep_fleet: bool, on_event: Callback | None = None,
                 on_progress: Callable[[object], None] | None = None) -> None:
        self.job = job
        self.workdir = Path(job.workdir)
        self.resume = resume
        self.keep_fleet = keep_fleet
        self.on_event = on_event or (lambda e: None)
        self.on_progress = on_progress
        self.summary = RunSummary(workdir=self.workdir)
        self.metrics = None  # a MetricsServer while the job serves its metrics

    def say(self, stage: str, kind: str, detail: str = "") -> None:
        if self.metrics is not None and kind == "start":
            self.metrics.run.stage = stage
        self.on_event(RunEvent(stage, kind, detail))

    async def run(self) -> RunSummary:
        section = self.job.generate
        if section.metrics_port is None:
            return await self._run()
        from fleetgen.metrics import MetricsServer  # prometheus_client only when asked for

        with MetricsServer(section.metrics_host, section.metrics_port, allow_remote=section.metrics_allow_remote) as m:
            self.metrics = m
            self.say("metrics", "info", f"serving {m.url}")
            summary = await self._run()
            m.run.stage = "done"
            return summary

    async def _run(self) -> RunSummary:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.book = StageBook(self.workdir)
        if self.book.done and not self.resume:
            raise ConfigError(
                f"{self.workdir} holds an earlier run ({', '.join(self.book.done)} done)",
                hint="pass --resume to continue it (finished stages are skipped), or set another workdir",
            )
        self._doctor()
        prompts, prompts_fp = await self._mix()
        gen_fp = await self._generate(prompts, prompts_fp)
        export_fp = self._export(gen_fp)
        self._report(gen_fp, export_fp)
        return self.summary

    def _enter(self, stage: str, fp: str, outputs_exist: bool = True) -> bool:
        """True when the stage must run; handles skip and invalidation messages."""
        if self.book.is_current(stage, fp) and outputs_exist:
            self.summary.stages_skipped.append(stage)
            self.say(stage, "skip", "up to date")
            return False
        if self.book.changed(stage, fp):
            dropped = self.book.invalidate_from(stage)
            self.say(stage, "invalidated", f"its config or inputs changed: re-running {', '.join(dropped)}")
        self.summary.stages_run.append(stage)
        self.say(stage, "start")
        return True

    def _doctor(self) -> None:
        if self.job.doctor is None:
            return
        from fleetgen.doctor import run_doctor

        fp = fingerprint(self.job.doctor.model_dump(mode="json"))
        if not self._enter("doctor", fp):
            return
        report = run_doctor(self.job.doctor)
        (self.workdir / "doctor.json").write_text(report.model_dump_json(indent=2))
        if report.failed:
            raise FleetgenError(
                "doctor: " + "; ".join(f"{c.id}: {c.summary}" for c in report.failed),
                hint=f"read {self.workdir / 'doctor.json'}; `fleetgen doctor --fix DIR` writes the fix",
            )
        self.book.mark("doctor", fp)
        self.say("doctor", "done", f"{len(report.checks)} checks, none failed")

    async def _mix(self) -> tuple[Path, str]:
        if self.job.mix is None:
            prompts = Path(self.job.generate.prompts)
            sha, _rows = await asyncio.to_thread(prompts_fingerprint, prompts)
            self.summary.prompts = prompts
            return prompts, sha
        from fleetgen.mix import build_mix

        prompts = self.workdir / "prompts.jsonl"
        fp = fingerprint(self.job.mix.model_dump(mode="json"))
        if self._enter("mix", fp, prompts.exists()):
            summary = await asyncio.to_thread(
                build_mix, self.job.mix, prompts, self.workdir / "mix-report", log=lambda m: self.say("mix", "info", m)
            )
            self.book.mark("mix", fp, rows=summary.rows_written)
            self.say("mix", "done", f"{summary.rows_written} prompts -> {prompts}")
        self.summary.prompts = prompts
        return prompts, fp

    async def _generate(self, prompts: Path, prompts_fp: str) -> str:
        section = self.job.generate
        outdir = Path(section.output_dir) if section.output_dir else self.workdir / "generate"
        identity = section.model_dump(mode="json", exclude={"api_key", "force", "retry_errors", "prompts", "output_dir", *_WATCH_FIELDS})
        # Fields added later count only when set, so a job written before them keeps its fingerprint.
        for key, default in (("profiles", []), ("tool_match", "arguments"), ("shards", None), ("shard_runner", "auto"),
                             ("shard_retries", 3), ("replica_slice", None), ("history_reasoning", "template"),
                             ("tokenizer", None)):
            if identity.get(key) == default:
                identity.pop(key, None)
        model = self.job.fleet.model_dump(mode="json", include={"engine", "model", "served_model_name"}) if self.job.fleet else None
        fp = fingerprint(identity, prompts_fp, json.dumps(model))
        self.summary.results = outdir / "results.jsonl"
        if not self._enter("generate", fp, outdir.exists()):
            return fp
        started = self.workdir / "generate.fingerprint"  # written at start: covers partial runs too
        if outdir.exists() and started.exists() and started.read_text().strip() != fp:
            moved = outdir.with_name(f"{outdir.name}.replaced-{int(time.time())}")
            outdir.rename(moved)
            self.say("generate", "info", f"the job changed: earlier results kept in {moved}")
        started.write_text(fp)
        state_dir = await self._fleet_up() if self.job.fleet else None
        config = GenerateConfig.model_validate(
            {**section.model_dump(exclude={"prompts", "output_dir"}), "prompts": prompts, "output_dir": outdir,
             "fleet_state": state_dir}
        )
        try:
            stats = await self._supervised(config, state_dir)
        finally:
            if state_dir is not None and not self.keep_fleet:
                n = await asyncio.to_thread(down, state_dir)
                self.say("fleet", "info", f"fleet stopped ({n} processes)")
        for r in stats.replicas:
            if (gone := stats.stopped_answering(r)) is not None:
                self.say("generate", "info", f"replica {r.index} ({r.endpoint}) stopped answering {describe_silence(gone)}")
        if stats.interrupted or stats.done < stats.total:
            raise FleetgenError(
                f"generate stopped before the end ({stats.done}/{stats.total} done: {stats.stopped_reason or 'interrupted'})",
                hint="run again with --resume: finished rows are kept and only the rest is sent",
            )
        self.book.mark("generate", fp, ok=stats.ok, errors=stats.errors)
        self.say("generate", "done", f"{stats.ok} ok, {stats.errors} errors -> {outdir}")
        return fp

    async def _fleet_up(self) -> Path:
        cfg = self.job.fleet.model_copy(update={"state_dir": self.workdir / "fleet"})
        state_dir = Path(cfg.state_dir)
        try:
            read_state(state_dir)
            _, statuses = await fleet_status(state_dir, api_key=api_key_of(cfg), sample_s=0)
            if statuses and all(s.healthy for s in statuses):
                self.say("fleet", "skip", f"reusing the running fleet in {state_dir}")
                return state_dir
            self.say("fleet", "info", "an earlier fleet is not healthy: stopping it")
            await asyncio.to_thread(down, state_dir)
        except FleetError:
            pass
        self.say("fleet", "start", f"{cfg.replicas or 'auto'} replica(s) of {cfg.model} ({cfg.engine})")
        state = await up(cfg, on_progress=lambda p: self.say("fleet", "info", f"replica {p.index}: {p.phase.value}") if p.phase.value in ("ready", "failed") else None)
        self.say("fleet", "done", f"{len(state.replicas)} replica(s) ready")
        if self.metrics is not None:
            self.metrics.run.stage = "generate"
        return state_dir

    async def _supervised(self, config: GenerateConfig, state_dir: Path | None):
        if state_dir is None or not self.job.supervise:
            return await generate_run(config, on_progress=self.on_progress, metrics=self.metrics)

        def on_sup(e: SupervisorEvent) -> None:
            self.say("supervisor", "info", f"replica {e.index}: {e.kind} {e.detail}")

        async with Supervisor(
            state_dir, api_key=api_key_of(self.job.fleet), max_restarts=self.job.max_restarts,
            hang_timeout_s=self.job.hang_timeout_s, on_event=on_sup,
        ) as sup:
            if self.metrics is not None:
                self.metrics.run.restarts = lambda: sup.restarts
            stats = await generate_run(config, on_progress=self.on_progress, metrics=self.metrics)
        self.summary.restarts = sup.restarts
        _record_restarts(Path(config.output_dir), sup)
        return stats

    def _export(self, gen_fp: str) -> str | None:
        if self.job.export is None:
            return None
        from fleetgen.export import ExportConfig, export

        section = self.job.export
        output = section.output if section.output.is_absolute() else self.workdir / section.output
        results_dir = section.results_dir or self.summary.results.parent
        cfg = ExportConfig.model_validate(
            {**section.model_dump(), "results_dir": results_dir, "output": output, "overwrite": True}
        )
        fp = fingerprint(section.model_dump(mode="json"), gen_fp)
        exists = all(p.exists() for p in cfg.output_paths().values())
        self.summary.export = cfg.output_paths()
        if self._enter("export", fp, exists):
            s = export(cfg)
            self.book.mark("export", fp, written=dict(s.written))
            self.say("export", "done", f"{sum(s.written.values())} rows -> {', '.join(str(p) for p in cfg.output_paths().values())}")
        return fp

    def _report(self, gen_fp: str, export_fp: str | None) -> None:
        if self.job.report is None:
            return
        from fleetgen.report import build_report

        dest = self.workdir / "report"
        fp = fingerprint(self.job.report.model_dump(mode="json"), gen_fp)
        self.summary.report = dest / "report.md"
        if self._enter("report", fp, self.summary.report.exists()):
            mix_report = self.workdir / "mix-report"
            build_report(
                self.summary.results.parent, self.job.report.html, dest=dest,
                mix_report=mix_report if mix_report.exists() else None,
            )
            self.book.mark("report", fp)
            self.say("report", "done", str(self.summary.report))


def _record_restarts(outdir: Path, sup: Supervisor) -> None:
    """Put the supervisor's restarts into generate's stats.json, where a person looks for them."""
    path = outdir / "stats.json"
    try:
        stats = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return
    stats["replica_restarts"] = {str(k): v for k, v in sup.restarts.items()}
    stats["supervisor_events"] = [{"replica": e.index, "kind": e.kind, "detail": e.detail, "at": e.at} for e in sup.events]
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(stats, indent=2))
    os.replace(tmp, path)


def run_job(job: JobConfig, *, resume: bool = False, keep_fleet: bool = False, on_event: Callback | None = None,
            on_progress: Callable[[object], None] | None = None) -> RunSummary:
    """Run every configured stage of `job`; finished stages are skipped on resume."""
    return asyncio.run(Pipeline(job, resume=resume, keep_fleet=keep_fleet, on_event=on_event, on_progress=on_progress).run())
