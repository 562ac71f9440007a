"""hedging.py on its own, with an injected clock: what slow is, and the twin's answer taken in the first's place.

The dispatcher is replaced by a STAND-IN (`StandinSlots`: one other replica, always free), so the
rule is judged on the clock hedging is given, not on how fast this machine runs.
"""

from __future__ import annotations

import asyncio

from fleetgen.generate.dispatch.hedging import HEDGE_MAX_LOAD, HEDGE_MIN_OBSERVED, Hedging
from fleetgen.generate.dispatch.replica import Replica


class StandinSlots:
    """A STAND-IN for the dispatcher's side of hedging: records what hedging asks of it."""

    def __init__(self, other: Replica) -> None:
        self.other = other
        self.asked: list[float] = []  # max_load of each try_acquire_other
        self.released: list[tuple[int, bool]] = []

    def try_acquire_other(self, than: Replica, *, max_load: float = 1.0) -> Replica | None:
        self.asked.append(max_load)
        return self.other

    def release(self, r: Replica, *, ok: bool = False) -> None:
        self.released.append((r.index, ok))

    def release_after(self, r: Replica, exc: BaseException) -> None:
        self.released.append((r.index, False))

    def observe(self, r: Replica, started: float) -> None:
        pass

    async def changed(self) -> None:
        await asyncio.sleep(0)


async def test_slow_is_twice_the_median_answer_and_the_twins_answer_replaces_the_first():
    now = [0.0]
    first, other = Replica(0, "http://r0", 4), Replica(1, "http://r1", 4)
    slots = StandinSlots(other)
    hedging = Hedging(slots, hedge_after_s=0.05, clock=lambda: now[0])
    hedging.latencies.extend([0.2] * HEDGE_MIN_OBSERVED)  # slow: max(0.05, 2 x 0.2) = 0.4 s
    hedging.enter_tail()

    async def fn(r: Replica) -> int:
        if r is first:
            await asyncio.sleep(30)
        return r.index

    async def request() -> tuple[object, Replica]:
        flight = hedging.track(first, 0.0, fn)
        try:
            await fn(first)
        except asyncio.CancelledError:
            assert hedging.first_cancelled(flight), "cancelled by its twin's answer, not from outside"
            return flight.twin_answer()
        raise AssertionError("the first request cannot answer")

    task = asyncio.ensure_future(request())
    now[0] = 0.3  # past hedge_after_s, short of twice the median
    await asyncio.sleep(0.15)
    assert slots.asked == [] and not task.done()
    now[0] = 0.5
    answer, replica = await asyncio.wait_for(task, 5)
    assert (answer, replica) == (1, other)
    assert slots.asked == [HEDGE_MAX_LOAD] and other.stats.hedges == 1
    assert slots.released == [(1, True), (0, False)]  # the twin's slot with its answer, the first's without
    assert first.stats.moved == 1 and first.stats.silent == 1
