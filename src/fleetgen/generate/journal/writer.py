"""The one task that owns the journal: it records outcomes and group-commits them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from fleetgen.errors import OutputError
from fleetgen.generate.journal.directory import Journal
from fleetgen.generate.journal.outcomes import Batch, Outcome, record
from fleetgen.generate.observe.stats import Stats
from fleetgen.rows.doneset import DoneSet

_CLOSE = object()


class Writer:
    """Outcomes go in through `put`; each batch is one write and one fsync per file, off the event loop.

    Group commit: a batch gathers for up to `commit_interval_s`, or until it is half the queue.
    """

    def __init__(
        self,
        journal: Journal,
        done: DoneSet,
        stats: Stats,
        *,
        queue_size: int,
        commit_interval_s: float = 0.0,
        on_commit: Callable[[Stats], None] | None = None,
        on_durable: Callable[[], None] | None = None,
        job: str | None = None,
    ) -> None:
        self.journal = journal
        self.done = done
        self.stats = stats
        self.commit_interval_s = commit_interval_s
        self.on_commit = on_commit
        self.on_durable = on_durable  # after each commit that succeeded: the done set now equals the disk
        self.job = job  # the digest of the job's identity, on every line (job_history.py)
        self._queue: asyncio.Queue[object] = asyncio.Queue(maxsize=queue_size)
        # A batch this large is committed at once: waiting out the interval with the queue filling
        # would stop the run loop at `put` (it capped a fast fleet at queue_size / interval rows/s).
        self._batch_full = max(1, queue_size // 2)
        self._due = asyncio.Event()
        self._closing = False
        self.error: OutputError | None = None

    async def put(self, outcome: Outcome) -> None:
        """Waits when the writer is behind: backpressure instead of unbounded memory.

        Raises the writer's OutputError once the output directory failed: the run must stop.
        """
        if self.error is not None:
            raise self.error
        await self._queue.put(outcome)
        if self._queue.qsize() >= self._batch_full:
            self._due.set()

    async def close(self) -> None:
        self._closing = True
        await self._queue.put(_CLOSE)
        self._due.set()

    async def run(self) -> None:
        while True:
            items = [await self._queue.get()]
            while not self._queue.empty():
                items.append(self._queue.get_nowait())
            batch = Batch()
            closing = False
            for item in items:
                if item is _CLOSE:
                    closing = True
                elif self.error is None:  # after a failed commit, nothing more is recorded or counted
                    record(item, batch, self.done, self.stats, self.job)  # type: ignore[arg-type]
            if batch and self.error is None:
                # fsync may take milliseconds; outcomes that arrive meanwhile join the next batch.
                try:
                    await asyncio.to_thread(
                        self.journal.commit, batch.results, batch.errors, (batch.hashes, batch.samples)
                    )
                    if self.on_durable:
                        self.on_durable()
                except OutputError as e:
                    # Nothing of this batch is on disk (the journal cut it back); a resume redoes it.
                    # Keep draining the queue so no producer blocks; `put` now raises.
                    self.error = e
                    self.stats.stopped_reason = e.message
            if self.on_commit:
                self.on_commit(self.stats)
            if closing:
                if self.error is not None:
                    raise self.error
                return
            await self._gather()

    async def _gather(self) -> None:
        """Let the next batch gather for up to commit_interval_s; less once it is full or the run closes."""
        if not self.commit_interval_s or self._closing or self._queue.qsize() >= self._batch_full:
            return
        self._due.clear()
        try:
            async with asyncio.timeout(self.commit_interval_s):
                await self._due.wait()
        except TimeoutError:
            pass
