"""`generate(config)`: the entry point that ties input, journal, dispatcher and writer together."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
import traceback
from array import array
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from fleetgen.errors import ConfigError, MissingTokenIdsError, NoReplicaError, OutputError
from fleetgen.fleet.state import read_state
from fleetgen.generate.dispatch import client
from fleetgen.generate.dispatch.auto_limit import LimitPolicy
from fleetgen.generate.config import GenerateConfig
from fleetgen.generate.turns.conversation import Session, regenerate
from fleetgen.generate.dispatch.dispatcher import Dispatcher, DispatchPolicy
from fleetgen.rows.doneset import U64, DoneSet, id_hash
from fleetgen.generate.dispatch.fleet_watch import follow_fleet
from fleetgen.generate.gc_tuning import fewer_collections
from fleetgen.generate.turns.history_reasoning import decide as decide_history_reasoning
from fleetgen.generate.journal.complete import mark_complete, read_complete
from fleetgen.generate.dispatch.load_poll import LoadPoller
from fleetgen.generate.journal.directory import Journal
from fleetgen.generate.journal.identity import check_identity
from fleetgen.generate.journal.outdir import write_atomic
from fleetgen.rows.files import journal_names
from fleetgen.generate.journal.lease import Lease
from fleetgen.generate.turns.paths import choose_all, describe, job_bodies
from fleetgen.generate.journal.outcomes import Batch, Failed, Outcome, Skipped, record
from fleetgen.generate.prompts.reader import (
    BadRow, PromptRecord, fingerprint, is_parquet, iter_rows, iter_rows_at, prompt_of, raw_id, surely_valid,
)
from fleetgen.generate.config.partition import Shard
from fleetgen.generate.observe.stats import Clock, Stats
from fleetgen.generate.dispatch.warmup import Warmup
from fleetgen.generate.observe.watch import JobWatch
from fleetgen.generate.journal.checkpoint import CheckpointProgress, job_digest
from fleetgen.generate.prompts.stamp import stamped_fingerprint
from fleetgen.generate.journal.writer import Writer

if TYPE_CHECKING:
    from fleetgen.metrics import MetricsServer

# What to do about a bad input row, appended to its reason in errors.jsonl.
ROW_HINT = "fix or drop the row in the prompt file, then rerun with --retry-errors --force (the file changed)"
DEFAULT_WINDOW = 64
# Requests queued on each server beyond what it runs at once, so a finished slot never waits on us.
WINDOW_QUEUE = 8
WRITER_QUEUE_MIN = 1024


@dataclass(frozen=True)
class Target:
    """Where requests go: endpoints, the model they serve, the window per replica (where auto starts)."""

    endpoints: list[str]
    model: str | None
    window: int
    api_key: str | None
    auto: bool = False  # --concurrency auto: the windows follow the engines' load (load_poll.py)


def resolve_target(config: GenerateConfig) -> Target:
    """Endpoints from the fleet state or --endpoint, with the API key from config or FLEETGEN_API_KEY."""
    key = config.api_key.get_secret_value() if config.api_key else (os.environ.get("FLEETGEN_API_KEY") or None)
    mine = Shard.parse(config.replica_slice)  # the whole fleet, unless this process drives a slice of it
    if config.fleet_state is not None:
        fleet = read_state(config.fleet_state)
        if not fleet.replicas:
            raise ConfigError(f"fleet state {config.fleet_state} lists no replicas", hint="start one with `fleetgen up`")
        if fleet.api_key_required and not key:
            raise ConfigError("the fleet requires an API key", hint="pass --api-key or set FLEETGEN_API_KEY")
        running = fleet.max_running_requests
        default = (running + WINDOW_QUEUE) if running else DEFAULT_WINDOW
        endpoints, model = mine.of(fleet.endpoints), config.model or fleet.served_model_name
    else:
        default, endpoints, model = DEFAULT_WINDOW, mine.of(list(config.endpoints)), config.model
    auto = config.concurrency == "auto"
    return Target(endpoints, model, default if auto else int(config.concurrency), key, auto)


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
    with asyncio.Runner(loop_factory=event_loop_factory(config.event_loop)) as runner:
        return runner.run(run(config, on_progress=on_progress, clock=clock, handle_signals=handle_signals))


def event_loop_factory(choice: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop when chosen (or, for auto, installed); None: asyncio's own."""
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise ConfigError("event_loop uvloop: the uvloop package is not installed",
                              hint="pip install 'fleetgen[fast]', or use --event-loop asyncio") from None
        return None
    return uvloop.new_event_loop


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
    lease = None if config.shards is not None else Lease.acquire(
        Path(config.output_dir), Shard.parse(config.shard).suffix, group=config.lease_group, wait_s=config.lease_wait_s
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


async def _run(
    config: GenerateConfig, stop: _Stop, on_progress: Callable[[Stats], None] | None, clock: Clock,
    metrics: MetricsServer | None = None, lease: Lease | None = None,
) -> Stats:
    if config.shards is not None:  # one process is one shard; the N of them are run_shards' (shards.py)
        raise ConfigError("generate() runs one process; shards (--shards N) are run by fleetgen.generate.shards.run_shards",
                          hint="call run_shards(config), or use `fleetgen generate --shards N`")
    target = resolve_target(config)
    fp, rows = await asyncio.to_thread(stamped_fingerprint, config.prompts, config.output_dir)  # stamp.py
    stats = Stats(clock=clock, total=rows * config.samples)
    dispatcher = Dispatcher(target.endpoints, target.window, _policy(config), clock=clock, stats=stats)
    stats.replicas = dispatcher.all_stats
    poller = LoadPoller(dispatcher, LimitPolicy(), api_key=target.api_key) if target.auto else None
    connections = len(target.endpoints) * LimitPolicy().ceiling if poller is not None else dispatcher.capacity
    async with client.new_session(target.api_key, connections + 16) as http:
        model, context_length = await _check_endpoints(http, target)
        history = decide_history_reasoning(config.history_reasoning, config.tokenizer, config.fleet_state)
        identity = {
            "prompts": {"sha256": fp, "rows": rows},
            "model": model,
            "sampling": {**config.sampling(), **history.identity()},
        }
        shard = Shard.parse(config.shard)
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
        progress = None if is_parquet(config.prompts) else CheckpointProgress.open(
            outdir, shard.suffix, job_digest(identity, config.samples, (shard.index, shard.count)), done, config.samples,
            tuple(outdir / n for n in files), lambda: journal.ends,
        )
        session = Session(config, dispatcher, http, model, config.context_length or context_length,
                          history_reasoning=history.policy)
        stats.notes = session.notes  # one list: what the run notes lands in stats.json too
        if config.history_reasoning == "template":
            print(f"note: {history.note}", file=sys.stderr)
        if config.token_ids:
            session.paths = await choose_all(http, target.endpoints, model, job_bodies(config, model))
            print(f"generation path: {describe(session.paths)}", file=sys.stderr)
        writer = Writer(
            # Room for what completes during one commit interval even at low concurrency, so the
            # loop only waits on the writer when the disk is truly behind.
            journal, done, stats, queue_size=max(4 * dispatcher.capacity, WRITER_QUEUE_MIN),
            commit_interval_s=config.commit_interval_s, on_commit=on_progress,
            on_durable=progress.advance if progress is not None else None, job=job,
        )
        loop = _Loop(session, writer, done, stats, stop, shard, progress)
        watch = asyncio.create_task(follow_fleet(config.fleet_state, dispatcher, Shard.parse(config.replica_slice))) if config.fleet_state else None
        job_watch = JobWatch.start(config, stats, metrics)
        warmup = Warmup.start(config, dispatcher, http, model)  # replicas take work once their paths are warm
        polling = asyncio.create_task(poller.run()) if poller is not None else None
        try:
            await loop.run()
        finally:
            if warmup is not None:
                await warmup.close()
                stats.warmup = warmup.to_dict()
            for task in (watch, polling):
                if task is not None:
                    task.cancel()
            if progress is not None:
                progress.release()  # closed already (with its last frame) unless the run ended on an error
            journal.close()
            stats.finished = clock()
            try:
                write_atomic(outdir / f"stats{shard.suffix}.json", orjson.dumps(stats.to_dict(), option=orjson.OPT_INDENT_2))
            except OutputError as e:  # must not hide the run's own outcome; results are already safe
                print(f"note: stats.json not saved: {e.message}", file=sys.stderr)
            for note in session.notes:
                print(f"note: {note}", file=sys.stderr)
            await job_watch.close()
        if not stats.interrupted:  # the loop returned: every row is resolved
            try:
                mark_complete(outdir, identity, config.samples, loop.next_resumed, files, mark)
            except OutputError as e:
                print(f"note: {mark} not saved: {e.message}", file=sys.stderr)
    return stats


def _policy(config: GenerateConfig) -> DispatchPolicy:
    return DispatchPolicy(
        least_outstanding=config.dispatch == "least-outstanding",
        prefix_affinity=config.prefix_affinity,
        prefix_routing=config.prefix_routing,
        hedge=config.hedge,
        hedge_after_s=config.hedge_after_s,
        max_attempts=config.max_attempts,
        backoff_base_s=config.backoff_base_s,
        backoff_max_s=config.backoff_max_s,
        failures_to_eject=config.replica_failures,
        cooldown_s=config.replica_cooldown_s,
        give_up_after_s=config.give_up_after_s,
    )


async def _check_endpoints(http, target: Target) -> tuple[str, int | None]:
    """The model every reachable endpoint serves, and its context length; unreachable ones are left to retry."""
    answers = await asyncio.gather(*(client.served_models(http, e) for e in target.endpoints))
    reachable = [(e, ids, ctx) for e, (ids, ctx) in zip(target.endpoints, answers) if ids]
    if not reachable:
        if target.model is None:
            raise NoReplicaError(
                f"no endpoint answers /v1/models: {', '.join(target.endpoints)}",
                hint="check that the servers are up (`fleetgen status`), or pass --model",
            )
        return target.model, None
    model = target.model or reachable[0][1][0]
    wrong = [f"{e} serves {ids}" for e, ids, _ in reachable if model not in ids]
    if wrong:
        raise ConfigError(
            f"not every endpoint serves model {model!r}: " + "; ".join(wrong),
            hint="every replica must serve the same model; pass --model or fix the endpoints",
        )
    contexts = [c for _, _, c in reachable if c]
    return model, (min(contexts) if contexts else None)


class FirstLines:
    """Line of the first row of each id, by 64-bit id hash, in two flat arrays (12 bytes a slot).

    A dict of ints costs ~110 bytes an entry, over 1 GB at 10M prompts; this stays near 200 MB.
    Open addressing with linear probing; the table doubles at 3/4 full. Hashes are str hashes,
    stable within one process, which is all the duplicate check needs.
    """

    def __init__(self, bits: int = 16) -> None:
        self._mask = (1 << bits) - 1
        self._keys = array("Q", bytes(8 << bits))
        self._lines = array("I", bytes(4 << bits))
        self._n = 0

    @classmethod
    def for_rows(cls, rows: int) -> FirstLines:
        """A table that holds `rows` ids without growing (each doubling rehashes every slot in Python)."""
        return cls(max(16, (4 * rows // 3 + 1).bit_length()))

    def __len__(self) -> int:
        return self._n

    def setdefault(self, rid: str, line: int) -> int:
        """The first line recorded for `rid`, recording `line` when there is none."""
        key = (hash(rid) & U64) or 1  # 0 marks an empty slot
        keys, mask = self._keys, self._mask
        i = key & mask
        while True:
            k = keys[i]
            if k == key:
                return self._lines[i]
            if not k:
                break
            i = (i + 1) & mask
        keys[i] = key
        self._lines[i] = line
        self._n += 1
        if 4 * self._n > 3 * mask:
            self._grow()
        return line

    def _grow(self) -> None:
        old_keys, old_lines = self._keys, self._lines
        size = 2 * len(old_keys)
        self._mask = mask = size - 1
        self._keys = keys = array("Q", bytes(8 * size))
        self._lines = lines = array("I", bytes(4 * size))
        for key, line in zip(old_keys, old_lines):
            if key:
                i = key & mask
                while keys[i]:
                    i = (i + 1) & mask
                keys[i] = key
                lines[i] = line




class _Loop:
    """Keeps `capacity` samples in flight, hands outcomes to the writer, stops on signal or lost fleet."""

    # Skip finished rows before normalizing them (see _work). Off only in tests and the benchmark,
    # where every row then takes the full path, as before the fast skip existed.
    fast_skip = True
    shard = Shard()  # the whole job, unless the run is one of N shards
    next_resumed = 0  # what a resume after this run counts as already done (see complete.py)
    progress: CheckpointProgress | None = None  # the resume checkpoint: where this run starts reading, what it records

    def __init__(self, session: Session, writer: Writer, done: DoneSet, stats: Stats, stop: _Stop, shard: Shard = Shard(),
                 progress: CheckpointProgress | None = None) -> None:
        self.s = session
        self.shard = shard
        self.progress = progress
        self.writer = writer
        self.done = done
        self.stats = stats
        self.dispatcher = session.dispatcher
        self.config = session.config
        self._remaining: dict[str, int] = {}  # samples still in flight per prompt id, to drop its pin
        self._stop = stop.soft
        self._hard_stop = stop.hard
        self.request_stop = stop.request
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
        work = self._work()
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
            while not exhausted and not self._stop.done() and len(pending) < dispatcher.capacity + dispatcher.home_waiters:
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
                deadline = time.monotonic() + self.config.stop_grace_s
                self.stats.interrupted = True
                self.stats.stopped_reason = self.stats.stopped_reason or f"stopped by {self._stop.result()}"
                print(
                    f"stopping: waiting up to {self.config.stop_grace_s:.0f}s for {len(pending)} sample(s) in flight "
                    "(again to abandon them)",
                    file=sys.stderr,
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
                    self.request_stop("lost fleet")
                    self.request_stop("lost fleet")  # nothing in flight can finish: abandon at once
                    continue
                if isinstance(exc, MissingTokenIdsError):  # --require-token-ids: let in-flight samples finish, then fail
                    if self._fatal is None or isinstance(self._fatal, MissingTokenIdsError):
                        self._fatal = exc.merged(self._fatal)
                    self.stats.stopped_reason = self.stats.stopped_reason or "a turn without token ids (--require-token-ids)"
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
            traceback.print_exc(file=sys.stderr)
            return Failed(prompt.id, sample, f"internal error: {type(e).__name__}: {e}", "internal", prompt.line)
        finally:
            left = self._remaining.get(prompt.id, 1) - 1
            if left <= 0:
                self._remaining.pop(prompt.id, None)
                self.dispatcher.forget(prompt.id)
            else:
                self._remaining[prompt.id] = left

    def _work(self) -> Iterator[tuple[PromptRecord, int] | Failed]:
        """(prompt, sample) pairs not yet recorded, in file order; bad rows as row-level Failed.

        With a resume checkpoint (watermark.py) the rows before its watermark are not read: they are
        all resolved, and it says what they count for and which ids they claimed. Every row read is
        reported to the checkpoint (resolved now, or pending until its samples or row error are written).
        """
        samples = self.config.samples
        done, bad_lines = self.done, self.done.bad_lines
        progress = self.progress
        start = progress.start if progress is not None else None
        first_line = FirstLines.for_rows(max(0, self.stats.total // samples - (start.line - 1 if start else 0)))  # rows x samples
        has_all, claim, fast = done.has_all_hash, first_line.setdefault, self.fast_skip
        hash_ids = done.ids > 0  # nothing done before this run: no row is skipped (ids done later fail the claim)
        if start is not None:
            self.stats.resumed += start.count
            self.next_resumed += start.count
            if len(start.claims):
                prefix, local = start.claims.line_of, first_line.setdefault

                def claim(rid: str, line: int) -> int:
                    seen = prefix(rid)  # an id first seen before the watermark
                    return local(rid, line) if seen is None else seen
        if progress is not None:
            resolved, pending_row, pending_bad = progress.resolved, progress.pending_row, progress.pending_bad
            rows = iter_rows_at(self.config.prompts, start.offset, start.line) if start else iter_rows_at(self.config.prompts)
        else:
            resolved = pending_row = pending_bad = _ignore
            rows = ((line, row, 0) for line, row in iter_rows(self.config.prompts))
        shard = self.shard
        skipped = Batch()
        for line, row, end in rows:
            # Fast skip: a finished row is skipped without normalizing it (a resume of a finished run
            # is mostly this). It takes only rows the full path below would skip too, with the same
            # effects (counted as resumed, its id's first line claimed, nothing written):
            # - `surely_valid` passes only rows normalize accepts, so a row it would refuse never
            #   claims its id (the full path writes that row's error, and a later line of the id
            #   becomes the first); it runs after `has_all`, so a fresh run pays only the lookup;
            # - a line recorded as a bad row goes the full path: it may normalize now (a newer
            #   fleetgen, or --force on a changed file), and then the full path claims its id;
            # - the claim comes last, only for a row that is skipped: `claim` records the line.
            if fast and line not in bad_lines:
                rid = raw_id(row)
                if rid is not None and not shard.whole and surely_valid(row) and not shard.owns(rid):
                    resolved(line, end, 0, None)
                    continue  # another shard's row (normalize gives it this id)
                if (rid is not None and hash_ids and has_all(h := id_hash(rid), samples) and surely_valid(row)
                        and claim(rid, line) == line):
                    self.stats.resumed += samples  # what record(Skipped(rid, k)) does for each sample
                    self.next_resumed += samples
                    resolved(line, end, samples, h)
                    continue
            item = prompt_of(line, row)
            if not (shard.owns_line(line) if isinstance(item, BadRow) else shard.owns(item.id)):
                resolved(line, end, 0, None)
                continue
            self.next_resumed += 1 if isinstance(item, BadRow) else samples  # a duplicate: corrected below
            if isinstance(item, BadRow):
                if item.line not in bad_lines:
                    pending_bad(line, end)
                    yield Failed(item.id, None, f"line {item.line}: {item.reason}; {ROW_HINT}", "input", item.line)
                else:
                    self.stats.resumed += 1
                    resolved(line, end, 1, None)
                continue
            seen = claim(item.id, item.line)
            if seen != item.line:
                self.next_resumed += 1 - samples  # a later line of a claimed id: a row error, counted once
                if item.line not in bad_lines:
                    pending_bad(line, end)
                    yield Failed(
                        item.id, None, f"line {item.line}: duplicate id {item.id!r} (first on line {seen}); {ROW_HINT}",
                        "input", item.line,
                    )
                else:
                    self.stats.resumed += 1
                    resolved(line, end, 1, None)
                continue
            todo = [k for k in range(samples) if (item.id, k) not in done]
            for k in range(samples - len(todo)):
                record(Skipped(item.id, k), skipped, done, self.stats)
            if todo:
                self._remaining[item.id] = len(todo)
                pending_row(line, end, samples, item.id)
            else:
                resolved(line, end, samples, id_hash(item.id))
            for k in todo:
                yield item, k


def _ignore(*args: object) -> None:
    """The checkpoint's reports, when there is no checkpoint (a Parquet prompt file, the stream benchmark)."""
