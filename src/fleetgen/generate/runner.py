"""`generate(config)`: the entry point that ties input, journal, dispatcher and writer together."""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from fleetgen.errors import ConfigError, OutputError
from fleetgen.generate.config import GenerateConfig
from fleetgen.generate.dispatch import client
from fleetgen.generate.dispatch.auto_limit import LimitPolicy
from fleetgen.generate.dispatch.dispatcher import Dispatcher
from fleetgen.generate.dispatch.fleet_follow import follow_fleet
from fleetgen.generate.dispatch.freeze import completion_probe
from fleetgen.generate.dispatch.load_poll import LoadPoller
from fleetgen.generate.dispatch.stall import say_when_quiet
from fleetgen.generate.dispatch.target import check_endpoints, resolve_target
from fleetgen.generate.dispatch.warmup import Warmup
from fleetgen.generate.journal.checkpoint import CheckpointProgress, job_digest
from fleetgen.generate.journal.complete import mark_complete, read_complete
from fleetgen.generate.journal.directory import Journal
from fleetgen.generate.journal.identity import check_identity
from fleetgen.generate.journal.lease import Lease
from fleetgen.generate.journal.outdir import write_atomic
from fleetgen.generate.journal.writer import Writer
from fleetgen.generate.loop import SampleLoop, Stop
from fleetgen.generate.observe.stats import Clock, Stats
from fleetgen.generate.observe.watch import JobWatch
from fleetgen.generate.prompts.reader import is_parquet
from fleetgen.generate.prompts.stamp import stamped_fingerprint
from fleetgen.generate.prompts.worklist import WorkList
from fleetgen.generate.turns.conversation import Session
from fleetgen.generate.turns.history_reasoning import decide as decide_history_reasoning
from fleetgen.generate.turns.paths import choose_all, describe
from fleetgen.rows.files import journal_names
from fleetgen.rows.runs import run_ended, run_started

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from fleetgen.metrics import MetricsServer

WRITER_QUEUE_MIN = 1024


def generate(
    config: GenerateConfig,
    *,
    on_progress: Callable[[Stats], None] | None = None,
    clock: Clock = time.monotonic,
    handle_signals: bool = True,
) -> Stats:
    """Regenerate every (prompt, sample) not yet recorded in config.output_dir; returns the run's counters.

    Raises ResumeMismatchError when the directory holds another job (unless force), and
    NoReplicaError when every replica stopped answering (what is done stays done; run again to resume).
    """
    with asyncio.Runner(loop_factory=config.transport.loop_factory()) as runner:
        return runner.run(run(config, on_progress=on_progress, clock=clock, handle_signals=handle_signals))


async def run(
    config: GenerateConfig,
    *,
    on_progress: Callable[[Stats], None] | None = None,
    clock: Clock = time.monotonic,
    handle_signals: bool = True,
    metrics: MetricsServer | None = None,
) -> Stats:
    """The async form of `generate`, for callers that own an event loop (and, if they like, the metrics port)."""
    stop = Stop()
    loop = asyncio.get_running_loop()
    # One writer per journal (lease.py): taken first, so a second writer is refused before it touches anything.
    parts = config.sharding
    lease = (
        None
        if parts.shards is not None
        else Lease.acquire(
            Path(config.output_dir), parts.rows.suffix, group=parts.lease_group, wait_s=parts.lease_wait_s
        )
    )
    signals = (signal.SIGINT, signal.SIGTERM) if handle_signals else ()
    for sig in signals:
        loop.add_signal_handler(sig, stop.request, signal.Signals(sig).name)
    try:
        return await _run(config, stop, on_progress, clock, metrics, lease)
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
        if lease is not None:
            lease.release()


async def _run(
    config: GenerateConfig,
    stop: Stop,
    on_progress: Callable[[Stats], None] | None,
    clock: Clock,
    metrics: MetricsServer | None = None,
    lease: Lease | None = None,
) -> Stats:
    if config.sharding.shards is not None:  # one process is one shard; the N of them are run_shards' (shards.py)
        raise ConfigError(
            "generate() runs one process; shards (--shards N) are run by fleetgen.generate.shards.run_shards",
            hint="call run_shards(config), or use `fleetgen generate --shards N`",
        )
    target = resolve_target(config)
    fp, rows = await asyncio.to_thread(stamped_fingerprint, config.prompts, config.output_dir)  # stamp.py
    stats = Stats(clock=clock, total=rows * config.samples)
    dispatcher = Dispatcher(target.endpoints, target.window, config.routing, config.transport, clock=clock, stats=stats)
    stats.replicas = dispatcher.all_stats
    poller = LoadPoller(dispatcher, LimitPolicy(), api_key=target.api_key) if target.auto else None
    connections = len(target.endpoints) * LimitPolicy().ceiling if poller is not None else dispatcher.capacity
    async with client.new_session(target.api_key, connections + 16) as http:
        model, context_length = await check_endpoints(http, target)
        sampling = config.sampling
        history = decide_history_reasoning(sampling.history_reasoning, sampling.tokenizer, config.fleet_state)
        identity = {
            "prompts": {"sha256": fp, "rows": rows},
            "model": model,
            "sampling": {**sampling.identity(), **history.identity()},
        }
        shard = config.sharding.rows
        if not shard.whole:
            identity["shards"] = shard.count  # another split (or none) would not find this one's rows
        outdir = Path(config.output_dir)
        outdir.mkdir(parents=True, exist_ok=True)
        job = check_identity(outdir, identity, force=config.force)
        files, mark = list(journal_names(shard.suffix)[:2]), f"complete{shard.suffix}.json"
        resumed = None if config.retry_errors else read_complete(outdir, identity, config.samples, files, mark)
        if resumed is not None:  # nothing changed since a run resolved every row: nothing to read or do
            stats.resumed = resumed
            stats.finished = clock()
            return stats
        journal, done = Journal.open(outdir, retry_errors=config.retry_errors, suffix=shard.suffix, lease=lease)
        progress = (
            None
            if is_parquet(config.prompts)
            else CheckpointProgress.open(
                outdir,
                shard.suffix,
                job_digest(identity, config.samples, (shard.index, shard.count)),
                done,
                config.samples,
                tuple(outdir / n for n in files),
                lambda: journal.ends,
            )
        )
        session = Session(
            sampling,
            config.transport,
            outdir,
            dispatcher,
            http,
            model,
            sampling.context_length or context_length,
            history_reasoning=history.policy,
        )
        stats.notes = session.notes  # one list: what the run notes lands in stats.json too
        if sampling.history_reasoning == "template":
            log.info(history.note)
        if sampling.token_ids:
            session.paths = await choose_all(http, target.endpoints, model, sampling.bodies(model))
            log.info(f"generation path: {describe(session.paths)}")
        writer = Writer(
            # Room for what completes during one commit interval even at low concurrency, so the
            # loop only waits on the writer when the disk is truly behind.
            journal,
            done,
            stats,
            queue_size=max(4 * dispatcher.capacity, WRITER_QUEUE_MIN),
            commit_interval_s=config.commit_interval_s,
            on_commit=on_progress,
            on_durable=progress.advance if progress is not None else None,
            job=job,
        )
        work = WorkList(config.prompts, config.samples, done, stats, shard=shard, progress=progress)
        loop = SampleLoop(session, writer, work, stop, config.stop_grace_s)
        fleet, mine = config.fleet_state, config.sharding.replicas
        watch = asyncio.create_task(follow_fleet(fleet, dispatcher, mine)) if fleet is not None else None
        job_watch = JobWatch.start(
            config.observe, stats, metrics, fleet_state=fleet, output_dir=outdir, auto=config.routing.auto
        )
        # Replicas take work once their paths are warm.
        warmup = Warmup.start(config.warmup, sampling, config.transport, dispatcher, http, model)
        polling = asyncio.create_task(poller.run()) if poller is not None else None
        quiet = asyncio.create_task(say_when_quiet(lambda: dispatcher.replicas, clock))
        freezes = (
            asyncio.create_task(dispatcher.freezes.run(completion_probe(http, model)))
            if config.transport.freeze_factor > 0
            else None
        )
        stats.fleet_silences = dispatcher.freezes.fleet_silences  # one list: the episodes land in stats.json
        run_id = run_started(outdir, shard=shard.suffix, job=job, model_path=sampling.tokenizer or target.model_path)
        try:
            await loop.run()
        finally:
            if warmup is not None:
                await warmup.close()
                stats.warmup = warmup.to_dict()
            for task in (watch, polling, quiet, freezes):
                if task is not None:
                    task.cancel()
            dispatcher.freezes.close()  # now, not when its task next runs: stats.json is written below
            if progress is not None:
                progress.release()  # closed already (with its last frame) unless the run ended on an error
            journal.close()
            stats.finished = clock()
            try:
                write_atomic(
                    outdir / f"stats{shard.suffix}.json", orjson.dumps(stats.to_dict(), option=orjson.OPT_INDENT_2)
                )
            except OutputError as e:  # must not hide the run's own outcome; results are already safe
                log.warning(f"stats.json not saved: {e.message}")
            run_ended(outdir, run_id, stats.to_dict())
            for note in session.notes:
                log.info(note)
            await job_watch.close()
        if not stats.interrupted:  # the loop returned: every row is resolved
            try:
                mark_complete(outdir, identity, config.samples, work.next_resumed, files, mark)
            except OutputError as e:
                log.warning(f"{mark} not saved: {e.message}")
    return stats
