"""A request that makes no progress is named, cancelled and re-sent, after a bound the replica's own pace sets.

A fixed timeout has to cover the slowest legitimate answer of any job on any engine (it was 120 s plus
0.5 s a token of `max_tokens`: 19 minutes at 2048 tokens), so one request a wedged engine never answers
held its slot, and, on a job with one replica, its sample, that long. An answer that is not streamed
shows no progress until it is whole, so the bound is derived from what the replica has shown it takes:
the slowest recent pace of its answers (seconds per token, queueing and prefill included, at least
MIN_TOKENS a request so that short answers do not make the pace look fast) times the request's
`max_tokens`, with a factor of margin and a floor. Until a replica has answered `MIN_OBSERVED`
requests, the request's own timeout is the only bound.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from fleetgen.generate.dispatch.client import TransientError
from fleetgen.generate.dispatch.replica import Replica

log = logging.getLogger(__name__)
T = TypeVar("T")

MIN_OBSERVED = 8
MIN_TOKENS = 16
PACE_WINDOW = 256  # the answers the pace is read from
RESORT = 32  # answers between two readings of the slow quantile
SLOW_QUANTILE = 0.95
# Every stall is logged for a replica's first few, then one in this many (the count is in the summary).
LOG_FIRST, LOG_EVERY = 3, 10


class Stalled(TransientError):
    """No answer within the bound the replica's pace sets: cancelled (its connection closed) and re-sent."""


class _Pace:
    """One replica's recent seconds per token, and their slow
    quantile, re-read every RESORT answers (this runs per request)."""

    __slots__ = ("recent", "slow", "_since")

    def __init__(self) -> None:
        self.recent: deque[float] = deque(maxlen=PACE_WINDOW)
        self.slow: float | None = None  # None until MIN_OBSERVED answers
        self._since = 0

    def add(self, seconds_per_token: float) -> None:
        self.recent.append(seconds_per_token)
        self._since += 1
        if len(self.recent) >= MIN_OBSERVED and (self.slow is None or self._since >= RESORT):
            ordered = sorted(self.recent)
            self.slow = ordered[min(len(ordered) - 1, int(SLOW_QUANTILE * len(ordered)))]
            self._since = 0


class StallGuard:
    """The paces of every replica's recent answers, and the bound they set on a request in flight."""

    def __init__(self, factor: float, floor_s: float) -> None:
        self.factor = factor
        self.floor_s = floor_s
        self._paces: dict[int, _Pace] = {}  # by id(Replica): a replacement starts afresh

    def observe(self, r: Replica, latency_s: float, completion_tokens: int) -> None:
        """`r` answered a request in `latency_s` with `completion_tokens` tokens."""
        pace = self._paces.get(id(r))
        if pace is None:
            pace = self._paces[id(r)] = _Pace()
        pace.add(latency_s / max(completion_tokens, MIN_TOKENS))

    def bound_s(self, r: Replica, max_tokens: int) -> float | None:
        """How long a request of `max_tokens` may go unanswered on `r`; None until its pace is known."""
        pace = self._paces.get(id(r))
        if pace is None or pace.slow is None:
            return None
        return max(self.floor_s, self.factor * pace.slow * max(max_tokens, MIN_TOKENS))

    async def within(self, bound_s: float, r: Replica, fn: Callable[[Replica], Awaitable[T]], max_tokens: int) -> T:
        """`fn(r)`, cancelled (its connection closed: the engine drops it) once it goes unanswered for `bound_s`.

        One timer handle, not asyncio.timeout: this runs per request, and the context manager cost ~20 calls more.
        """
        task = asyncio.current_task()
        expired: list[bool] = []
        timer = asyncio.get_running_loop().call_later(bound_s, _expire, task, expired)
        try:
            return await fn(r)
        except asyncio.CancelledError:
            if expired and task.uncancel() == 0:  # type: ignore[union-attr]  # the timer's cancel, and nobody else's
                raise self.stalled(r, bound_s, max_tokens) from None
            raise
        finally:
            timer.cancel()

    def stalled(self, r: Replica, bound_s: float, max_tokens: int) -> Stalled:
        """Count and name a request `r` left unanswered for `bound_s`; the error that re-sends it."""
        r.stats.stalled += 1
        n = r.stats.stalled
        if n <= LOG_FIRST or n % LOG_EVERY == 0:
            log.warning(
                "replica %d (%s): a request of %d tokens had no answer after %.1fs, the bound its recent pace sets; "
                "cancelled and re-sent (%d so far on this replica)",
                r.index,
                r.endpoint,
                max_tokens,
                bound_s,
                n,
            )
        return Stalled(f"no answer after {bound_s:.1f}s, the bound its replica's pace sets for {max_tokens} tokens")


def _expire(task: asyncio.Task | None, expired: list[bool]) -> None:
    """A request's stall bound passed: cancel the task awaiting it, saying it was the timer (StallGuard.within)."""
    expired.append(True)
    if task is not None:
        task.cancel()


QUIET_S = 30.0  # no answer from a replica with requests in flight for this long is said, once per silence


async def say_when_quiet(
    replicas: Callable[[], Sequence[Replica]], clock: Callable[[], float], quiet_s: float = QUIET_S
) -> None:
    """Until cancelled: log a replica that holds requests and has answered none for `quiet_s`, so a job never
    waits silently (its requests are re-sent once the stall bound passes; this says what it waits on meanwhile)."""
    told: dict[int, float] = {}  # id(replica) -> the last answer time the silence was told for
    while True:
        await asyncio.sleep(quiet_s / 3)
        now = clock()
        for r in replicas():
            s = r.stats
            since = s.last_answer_at if s.last_answer_at is not None else s.first_request_at
            if since is None or not s.outstanding or now - since < quiet_s or told.get(id(r)) == since:
                continue
            told[id(r)] = since
            log.warning(
                "replica %d (%s): no answer for %.0fs, %d request(s) in flight; waiting (each is re-sent "
                "once the bound its replica's pace sets passes)",
                r.index,
                r.endpoint,
                now - since,
                s.outstanding,
            )
