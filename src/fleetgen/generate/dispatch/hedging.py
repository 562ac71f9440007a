"""Hedging: in the tail, a request slower than the answers seen
gets a twin on a draining replica; the first answer wins.

Only in the tail (the input exhausted): before it, every free slot has new work to take, and a
twin would take the slot from it. Slow is judged against answers seen: until HEDGE_MIN_OBSERVED
requests have answered no twin is sent, then slow is max(`hedge_after_s`, 2x their median) (a job
that fits in the window is all tail from its first second, and a flat threshold twinned most of
its requests).
A twin is a full prefill on a replica without the prompt's prefix, so it goes only to a replica at
most HEDGE_MAX_LOAD full, where it costs little of the batch; it waits for one to drain that far.
BENCHMARKS.md ("race against the router", 1 and 1c; "tail") has the runs behind these rules.

The request itself gets no task of its own (one per request cost CPU on every request, see
BENCHMARKS.md "Hedging without a task per request"): the sample's task awaits it directly and
registers a Flight. From the tail on, a watcher task per flight waits out the threshold and a free
slot, then starts the twin. If the twin answers first it cancels the sample's task, whose await
then takes the twin's answer (`Task.uncancel`; a cancel from outside as well still propagates).
If the first answers first, the twin is cancelled; if the first fails, the twin may still answer.
"""

from __future__ import annotations

import asyncio
import statistics
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Protocol

from fleetgen.generate.dispatch.replica import Replica
from fleetgen.generate.observe.stats import Clock

# Hedging waits for this many answers before it calls a request slow, and twins only onto a replica at
# most this full (the module's docstring says why).
HEDGE_MIN_OBSERVED = 8
HEDGE_MAX_LOAD = 0.5

RequestFn = Callable[[Replica], Awaitable[object]]


class Slots(Protocol):
    """What hedging needs of the dispatcher: a slot on another replica, and each slot returned with its outcome."""

    def try_acquire_other(self, than: Replica, *, max_load: float = 1.0) -> Replica | None: ...

    def release(self, r: Replica, *, ok: bool = False) -> None: ...

    def release_after(self, r: Replica, exc: BaseException) -> None: ...

    def observe(self, r: Replica, started: float) -> None: ...

    async def changed(self) -> None: ...


# What a hedged request's first attempt is doing.
_RACING, _FIRST_FAILED, _TWIN_WON, _OVER = "racing", "first failed", "twin won", "over"


class Flight:
    """One request awaited directly by its sample's task; in the tail, a watcher may send it a twin."""

    __slots__ = ("replica", "started", "task", "state", "watcher", "twin", "twin_replica")

    def __init__(self, replica: Replica, started: float) -> None:
        self.replica = replica
        self.started = started
        self.task = asyncio.current_task()
        self.state = _RACING
        self.watcher: asyncio.Future | None = None
        self.twin: asyncio.Future | None = None
        self.twin_replica: Replica | None = None

    def twin_answer(self) -> tuple[object, Replica]:
        return self.twin.result(), self.twin_replica  # type: ignore[union-attr,return-value]


class Hedging:
    """The hedges of one dispatcher's requests; all methods run on one event loop.

    The dispatcher calls `track` when a request starts, then exactly one of `first_answered`,
    `first_cancelled` or `first_failed` when its await ends; `enter_tail` once the input is exhausted.
    """

    def __init__(self, slots: Slots, hedge_after_s: float, clock: Clock) -> None:
        self.slots = slots
        self.hedge_after_s = hedge_after_s
        self.clock = clock
        self.latencies: deque[float] = deque(maxlen=256)  # of answers seen: what slow is judged against
        self.in_tail = False
        # Requests in flight before the tail, each with its request function: the tail watches them.
        self._flights: dict[Flight, RequestFn] = {}

    def enter_tail(self) -> None:
        """The input is exhausted: from now on stragglers may be hedged."""
        if not self.in_tail:
            self.in_tail = True
            for flight, fn in list(self._flights.items()):
                self._watch(flight, fn)
            self._flights.clear()

    def track(self, r: Replica, started: float, fn: RequestFn) -> Flight:
        """A request on `r` starts, awaited by the current task: in the tail it is watched from now."""
        flight = Flight(r, started)
        if self.in_tail:
            self._watch(flight, fn)
        else:
            self._flights[flight] = fn
        return flight

    def first_answered(self, flight: Flight) -> tuple[object, Replica] | None:
        """The first request answered: None to take its answer (its slot is the caller's to return),
        or the twin's answer, when that won and fn swallowed the cancel it sent (its slot is returned here)."""
        self._leave(flight)
        if flight.state is not _TWIN_WON:
            return None
        flight.task.uncancel()  # type: ignore[union-attr]
        flight.replica.stats.silent += 1
        self.slots.release(flight.replica)
        return flight.twin_answer()

    def first_cancelled(self, flight: Flight) -> bool:
        """The first request was cancelled: True if by its twin's answer (take `twin_answer`), False if from
        outside (re-raise). Either way its slot is returned here."""
        won = flight.state is _TWIN_WON
        self._leave(flight)
        flight.replica.stats.silent += 1  # it got no answer there: its twin's came first, or the run abandons it
        self.slots.release(flight.replica)
        # Cancelled from outside as well (the count stays above 0): the run is abandoning it.
        return won and flight.task.uncancel() == 0  # type: ignore[union-attr]

    async def first_failed(self, flight: Flight, exc: BaseException) -> tuple[object, Replica]:
        """The first request failed (its slot already returned): a twin in flight may still answer;
        else `exc` propagates, or the twin's error when it failed too."""
        twin = flight.twin
        if flight.state is _TWIN_WON:  # fn turned the cancel that the twin's answer sent it into an error
            self._leave(flight)
            flight.task.uncancel()  # type: ignore[union-attr]
            return flight.twin_answer()
        if twin is None or flight.state is not _RACING:
            self._leave(flight)
            raise exc
        flight.state = _FIRST_FAILED
        self._leave(flight)
        try:
            await asyncio.wait((twin,))
        except asyncio.CancelledError:
            flight.state = _OVER
            twin.cancel()
            raise
        if twin.cancelled():
            raise exc
        twin_exc = twin.exception()
        if twin_exc is not None:
            raise twin_exc
        return flight.twin_answer()

    def _leave(self, flight: Flight) -> None:
        """The first request is over (answered, failed or cancelled): no twin may start or win any more."""
        self._flights.pop(flight, None)
        if flight.state is _RACING:
            flight.state = _OVER
        if flight.watcher is not None:
            flight.watcher.cancel()  # no effect once it started the twin (it has returned)
        if flight.twin is not None and flight.state is _OVER:
            flight.twin.cancel()  # the losing hedge: closing its connection makes the server abort it

    def _watch(self, flight: Flight, fn: RequestFn) -> None:
        flight.watcher = asyncio.ensure_future(self._hedge_later(flight, fn))

    async def _hedge_later(self, flight: Flight, fn: RequestFn) -> None:
        """Wait until the request is slow and another replica has drained enough, then start its twin."""
        while True:
            known = len(self.latencies) >= HEDGE_MIN_OBSERVED
            threshold = max(self.hedge_after_s, 2 * statistics.median(self.latencies)) if known else self.hedge_after_s
            remaining = threshold - (self.clock() - flight.started)
            if known and remaining <= 0:
                break
            await asyncio.sleep(remaining if remaining > 0 else self.hedge_after_s / 4)  # then judge again
        while (other := self.slots.try_acquire_other(flight.replica, max_load=HEDGE_MAX_LOAD)) is None:
            # No other replica has drained enough: try again when a
            # slot frees up (cancelled if the request answers first).
            await self.slots.changed()
        other.stats.hedges += 1
        flight.twin_replica = other
        flight.twin = twin = asyncio.ensure_future(fn(other))
        twin.add_done_callback(lambda t: self._twin_done(flight, t))
        flight.watcher = None

    def _twin_done(self, flight: Flight, twin: asyncio.Future) -> None:
        """Return the twin's slot, exactly once; if it answered while the first still runs, it wins."""
        other = flight.twin_replica
        assert other is not None
        if twin.cancelled():
            self.slots.release(other)
            return
        exc = twin.exception()
        if exc is not None:
            self.slots.release_after(other, exc)  # the first request goes on (or, if it failed too, this error ends it)
            return
        if flight.state is _OVER:
            other.stats.answered(self.clock())
            self.slots.release(other)  # answered too, but the first answer already won
            return
        self.slots.release(other, ok=True)
        self.slots.observe(other, flight.started)
        if flight.state is _RACING and flight.task is not None:  # (None: run outside a task, nothing to cancel)
            flight.state = _TWIN_WON
            flight.replica.stats.moved += 1
            flight.replica.stats.silent_moved += 1
            flight.task.cancel()  # the first request is still inside `await fn(r)`: the cancel lands there
