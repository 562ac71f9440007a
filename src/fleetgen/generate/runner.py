"""`generate(config)`: the entry point that ties input, journal, dispatcher and writer together."""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from fleetgen.errors import ConfigError, MissingTokenIdsError, NoReplicaError, OutputError
from fleetgen.generate.config import GenerateConfig
from fleetgen.generate.dispatch import client
from fleetgen.generate.dispatch.auto_limit import LimitPolicy
from fleetgen.generate.dispatch.dispatcher import Dispatcher
from fleetgen.generate.dispatch.fleet_follow import follow_fleet
from fleetgen.generate.dispatch.load_poll import LoadPoller
from fleetgen.generate.dispatch.stall import say_when_quiet
from fleetgen.generate.dispatch.target import check_endpoints, resolve_target
from fleetgen.generate.dispatch.warmup import Warmup
from fleetgen.generate.gc_tuning import fewer_collections
from fleetgen.generate.journal.checkpoint import CheckpointProgress, job_digest
from fleetgen.generate.journal.complete import mark_complete, read_complete
from fleetgen.generate.journal.directory import Journal
from fleetgen.generate.journal.identity import check_identity
from fleetgen.generate.journal.lease import Lease
from fleetgen.generate.journal.outcomes import Failed, Outcome
from fleetgen.generate.journal.outdir import write_atomic
from fleetgen.generate.journal.writer import Writer
from fleetgen.generate.observe.stats import Clock, Stats
from fleetgen.generate.observe.watch import JobWatch
from fleetgen.generate.prompts.reader import PromptRecord, is_parquet
from fleetgen.generate.prompts.stamp import stamped_fingerprint
from fleetgen.generate.prompts.worklist import WorkList
from fleetgen.generate.turns.conversation import Session, regenerate
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
    stop = _Stop()
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


class _Stop:
    """First request: stop taking work and let in-flight samples finish; second: abandon them."""

    def __init__(self) -> None:
        loop = asyncio.get_running_loop()
        self.soft: asyncio.Future[str] = loop.create_future()
        self.hard: asyncio.Future[str] = loop.create_future()

    def request(self, reason: str) -> None:
        if not self.soft.done():
            self.soft.set_result(reason)
        elif not self.hard.done():
            self.hard.set_result(reason)

    def abandon(self, reason: str) -> None:
        """Stop at once: take no work and give up the samples in flight (both requests in one)."""
        for step in (self.soft, self.hard):
            if not step.done():
                step.set_result(reason)


async def _run(
    config: GenerateConfig,
    stop: _Stop,
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
        loop = _Loop(session, writer, work, stop, config.stop_grace_s)
        fleet, mine = config.fleet_state, config.sharding.replicas
        watch = asyncio.create_task(follow_fleet(fleet, dispatcher, mine)) if fleet is not None else None
        job_watch = JobWatch.start(
            config.observe, stats, metrics, fleet_state=fleet, output_dir=outdir, auto=config.routing.auto
        )
        # Replicas take work once their paths are warm.
        warmup = Warmup.start(config.warmup, sampling, config.transport, dispatcher, http, model)
        polling = asyncio.create_task(poller.run()) if poller is not None else None
        quiet = asyncio.create_task(say_when_quiet(lambda: dispatcher.replicas, clock))
        run_id = run_started(outdir, shard=shard.suffix, job=job, model_path=sampling.tokenizer or target.model_path)
        try:
            await loop.run()
        finally:
            if warmup is not None:
                await warmup.close()
                stats.warmup = warmup.to_dict()
            for task in (watch, polling, quiet):
                if task is not None:
                    task.cancel()
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


class _Loop:
    """Keeps `capacity` samples in flight, hands outcomes to the writer, stops on signal or lost fleet."""

    def __init__(self, session: Session, writer: Writer, work: WorkList, stop: _Stop, grace_s: float) -> None:
        self.s = session
        self.work = work
        self.progress = work.progress
        self.writer = writer
        self.stats = work.stats
        self.dispatcher = session.dispatcher
        self.grace_s = grace_s  # stop_grace_s: how long in-flight samples may finish after a stop
        self._stop = stop.soft
        self._hard_stop = stop.hard
        self.request_stop = stop.request
        self.abandon = stop.abandon
        self._fatal: BaseException | None = None

    async def run(self) -> None:
        writer_task = asyncio.create_task(self.writer.run())
        try:
            await self._drive()
        finally:
            await self.writer.close()
            await writer_task
        if self.progress is not None:  # the writer ended without an error: the journal is all on disk
            self.progress.close()
        self.writer.journal.save_done(if_changed=True)  # the next resume maps the done set, not rebuilds it
        if self._fatal is not None:
            raise self._fatal

    async def _drive(self) -> None:
        with fewer_collections():  # see gc_tuning.py: the collector cost more than the loop's own work
            await self._drive_all()

    async def _drive_all(self) -> None:
        work = iter(self.work)
        dispatcher = self.dispatcher
        pending: set[asyncio.Task[Outcome]] = set()
        # Tasks report themselves done through a callback: O(1) per completion, where asyncio.wait
        # over every pending task would add and remove `capacity` callbacks on each wake-up.
        finished: deque[asyncio.Task[Outcome]] = deque()
        wake = asyncio.Event()

        def on_done(task: asyncio.Future) -> None:
            finished.append(task)  # type: ignore[arg-type]
            wake.set()

        def more_room() -> None:  # a window grew, or a request waits for its home: send more (not while stopping)
            if not self._stop.done():
                wake.set()

        dispatcher.on_capacity = more_room
        self._stop.add_done_callback(on_done)
        self._hard_stop.add_done_callback(on_done)
        exhausted = False
        deadline: float | None = None
        while True:
            while (
                not exhausted and not self._stop.done() and len(pending) < dispatcher.capacity + dispatcher.home_waiters
            ):
                item = next(work, None)
                if item is None:
                    exhausted = True
                    self.dispatcher.enter_tail()
                elif isinstance(item, Failed):
                    await self.writer.put(item)
                else:
                    task = asyncio.create_task(self._sample(*item))
                    task.add_done_callback(on_done)
                    pending.add(task)
            # Before the return below: a stop that lands as the last in-flight samples finish still
            # leaves work undone, and the run must say so (exit 130), not end as if complete.
            if self._stop.done() and deadline is None and (pending or not exhausted):
                deadline = time.monotonic() + self.grace_s
                self.stats.interrupted = True
                self.stats.stopped_reason = self.stats.stopped_reason or f"stopped by {self._stop.result()}"
                log.warning(
                    f"stopping: waiting up to {self.grace_s:.0f}s for {len(pending)} sample(s) in flight "
                    "(again to abandon them)"
                )
            if not pending:
                return
            give_up = False
            if self._stop.done():
                if not any(t in pending for t in finished) and not self._hard_stop.done():
                    wake.clear()
                    try:
                        async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                            await wake.wait()
                    except TimeoutError:
                        pass
                give_up = self._hard_stop.done() or not any(t in pending for t in finished)
            elif not finished:
                wake.clear()
                await wake.wait()
            while finished:
                task = finished.popleft()
                if task not in pending:
                    continue  # a stop future, or a task already handled
                pending.discard(task)
                exc = task.exception()
                if isinstance(exc, NoReplicaError):
                    self._fatal = exc
                    self.stats.stopped_reason = exc.message
                    self.abandon("lost fleet")  # nothing in flight can finish
                    continue
                if isinstance(
                    exc, MissingTokenIdsError
                ):  # --require-token-ids: let in-flight samples finish, then fail
                    if self._fatal is None or isinstance(self._fatal, MissingTokenIdsError):
                        self._fatal = exc.merged(self._fatal)
                    self.stats.stopped_reason = (
                        self.stats.stopped_reason or "a turn without token ids (--require-token-ids)"
                    )
                    if not self._stop.done():
                        self.request_stop("a turn without token ids")
                    continue
                if exc is not None:
                    raise exc
                await self.writer.put(task.result())
            if give_up:
                await self._abandon(pending)
                return

    async def _abandon(self, pending: set[asyncio.Task[Outcome]]) -> None:
        """Cancel what is in flight: those samples are simply not recorded, and a resume redoes them."""
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        pending.clear()

    async def _sample(self, prompt: PromptRecord, sample: int) -> Outcome:
        try:
            return await regenerate(self.s, prompt, sample)
        except (NoReplicaError, MissingTokenIdsError, asyncio.CancelledError):
            raise
        except Exception as e:  # a bug must cost one row, not the run; the traceback says where
            log.exception(f"internal error in sample {sample} of {prompt.id}: recorded as its error")
            return Failed(prompt.id, sample, f"internal error: {type(e).__name__}: {e}", "internal", prompt.line)
        finally:
            if self.work.finished(prompt.id):
                self.dispatcher.forget(prompt.id)  # its last sample: drop the id's replica pin
