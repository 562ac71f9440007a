"""The one task that owns the journal: it records outcomes and group-commits them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from fleetgen.generate.journal import DoneSet, Journal
from fleetgen.generate.outcomes import Batch, Outcome, record
from fleetgen.generate.stats import Stats

_CLOSE = object()


class Writer:
    """Outcomes go in through `put`; each batch is one write and one fsync per file, off the event loop."""

    def __init__(
        self,
        journal: Journal,
        done: DoneSet,
        stats: Stats,
        *,
        queue_size: int,
        commit_interval_s: float = 0.0,
        on_commit: Callable[[Stats], None] | None = None,
    ) -> None:
        self.journal = journal
        self.done = done
        self.stats = stats
        self.commit_interval_s = commit_interval_s
        self.on_commit = on_commit
        self._queue: asyncio.Queue[object] = asyncio.Queue(maxsize=queue_size)

    async def put(self, outcome: Outcome) -> None:
        """Waits when the writer is behind: backpressure instead of unbounded memory."""
        await self._queue.put(outcome)

    async def close(self) -> None:
        await self._queue.put(_CLOSE)

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
                else:
                    record(item, batch, self.done, self.stats)  # type: ignore[arg-type]
            if batch:
                # fsync may take milliseconds; outcomes that arrive meanwhile join the next batch.
                await asyncio.to_thread(self.journal.commit, batch.results, batch.errors)
            if self.on_commit:
                self.on_commit(self.stats)
            if closing:
                return
            if self.commit_interval_s:
                await asyncio.sleep(self.commit_interval_s)
