"""The run's loop: keeps `capacity` samples in flight, hands outcomes to the writer, stops on signal or lost fleet."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque

from fleetgen.errors import MissingTokenIdsError, NoReplicaError
from fleetgen.generate.gc_tuning import fewer_collections
from fleetgen.generate.journal.outcomes import Failed, Outcome
from fleetgen.generate.journal.writer import Writer
from fleetgen.generate.prompts.reader import PromptRecord
from fleetgen.generate.prompts.worklist import WorkList
from fleetgen.generate.turns.conversation import Session, regenerate

log = logging.getLogger(__name__)


class Stop:
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


class SampleLoop:
    """Keeps `capacity` samples in flight, hands outcomes to the writer, stops on signal or lost fleet."""

    def __init__(self, session: Session, writer: Writer, work: WorkList, stop: Stop, grace_s: float) -> None:
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
                grace_over = False
                if not any(t in pending for t in finished) and not self._hard_stop.done():
                    wake.clear()
                    try:
                        async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                            await wake.wait()
                    except TimeoutError:
                        grace_over = True
                # Only a second request or the end of the grace gives up: a wake-up with no sample
                # finished (the stop future's own callback, which can run after this loop has begun
                # to wait) is not one, and giving up on it abandoned a clean Ctrl-C's samples at once.
                give_up = self._hard_stop.done() or grace_over or time.monotonic() >= deadline
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
        if pending:
            why = (
                f"stopped at once ({self._hard_stop.result()})"
                if self._hard_stop.done()
                else f"the {self.grace_s:g}s grace ran out"
            )
            log.warning(f"abandoning {len(pending)} sample(s) in flight: {why}; a resume redoes them")
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
