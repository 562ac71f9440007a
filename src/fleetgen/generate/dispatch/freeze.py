"""A replica that holds requests and answers none while the others answer is declared frozen.

A hung engine (a wedged GPU, a SIGSTOPped process) fails nothing: its requests just get no answer.
The per-request stall bound (stall.py) needs the replica's own pace, which a replica that froze
before its first answer never had; hedging waits for the tail. So a freeze cost minutes.

The evidence here is the fleet's pace, read two ways, both slowed by `factor` for margin:
- A replica that has answered while holding its requests answers, at the fleet's pace, about once
  per (seconds per answer x requests in flight) / (its requests in flight). Each gap between two
  answers of any replica, times the requests its replica held, is a sample of that; their slow end
  (a prefill pause, lockstep waves and the like show there) x `factor` / the requests it holds that
  were in flight at its last answer is how long it may stay silent. With 64 in flight that is seconds.
- A replica that has not answered since it was given its requests (a burst after being idle, or no
  answer yet in this run) owes answers by their ages: the share of the other replicas' recent
  answers that took less than a request's age / `factor` (its own, where it has answered enough and
  they are slower), summed over its requests over its silence. It is frozen once it owes OWED: about
  `factor` x the fleet's fast answers after it got them.
Either way it must have been silent MIN_SILENCE_S at least, and another replica must have gone on
answering well into its silence (its later half). Then it is frozen: every request it holds is
cancelled (its connection closed) and re-sent at once to the others, and it takes no work until a
probe (a 1-token completion, with a short timeout, backed off) answers; then it rejoins.

When every replica holding requests is silent, no one replica's silence says anything about it:
it is the job's problem (the network, this host, a shared device). That is said once per episode,
naming the replicas, and nobody is taken out; each request keeps its own bounds (stall.py, the
request timeout).
"""

from __future__ import annotations

import asyncio
import logging
from bisect import bisect_right
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

import aiohttp

from fleetgen.generate.dispatch.client import Rejected, TransientError, chat
from fleetgen.generate.dispatch.replica import Replica
from fleetgen.generate.dispatch.rotation import Rotation
from fleetgen.generate.observe.stats import Clock

log = logging.getLogger(__name__)

OWED = 3.0  # answers owed by their ages, at the fleet's pace slowed by the factor, that make a replica frozen
MIN_OBSERVED = 8  # answers of the other replicas before their pace says anything
MIN_SILENCE_S = 2.0  # never less silence than this (the client's own event loop can pause that long on a busy host)
LATENCIES = 128  # recent answer latencies kept per replica
GAPS = 256  # recent gaps between two answers kept per replica
CHECK_S = 0.5  # how often the replicas are looked at
PROBE_FIRST_S, PROBE_MAX_S = 1.0, 15.0  # the probe's first wait, doubled after each unanswered probe
PROBE_TIMEOUT_MIN_S = 5.0
QUIET_S = 30.0  # the fleet's silence that is said when no pace is known yet
EPISODES = 20  # freezes kept per replica for stats.json (the count is kept whole)

Probe = Callable[[Replica, float], Awaitable[object]]


class Frozen(TransientError):
    """The request's replica was declared frozen: cancelled (its connection closed) and re-sent elsewhere at once."""

    @property
    def counts_against_replica(self) -> bool:
        return False  # the freeze itself took the replica out; the probe, not a cool-down, brings it back


class Fleet(Protocol):
    """What the watch needs of the dispatcher: its replicas, a clock, and the rotation (the way back in)."""

    replicas: list[Replica]
    clock: Clock
    rotation: Rotation


class _Pace:
    """One replica's recent answer latencies, and its gaps between two answers x the requests it held."""

    __slots__ = ("latencies", "gaps")

    def __init__(self) -> None:
        self.latencies: deque[float] = deque(maxlen=LATENCIES)
        self.gaps: deque[float] = deque(maxlen=GAPS)  # seconds per answer per request in flight


class FreezeWatch:
    """Declares frozen replicas, re-sends their requests and probes them back; all methods run on one loop."""

    def __init__(self, fleet: Fleet, factor: float) -> None:
        self.fleet = fleet
        self.factor = factor
        self._cancelled: set[asyncio.Task] = set()  # requests this watch cancelled, not yet seen to end
        self._probes: dict[int, asyncio.Task] = {}
        self.fleet_silences: list[dict[str, Any]] = []  # the all-silent episodes, for stats.json
        self._silent_since: float | None = None  # start of the all-silent episode being told

    # --- on the request path ---------------------------------------------------------------

    def answered(self, r: Replica, started: float, now: float) -> None:
        """`r` answered a request sent at `started` (before its slot is returned: its last answer is still known)."""
        pace = r.pace  # on the replica, not in a dict: this runs per answer (a replacement starts afresh)
        if pace is None:
            pace = r.pace = _Pace()
        pace.latencies.append(now - started)
        prev = r.stats.last_answer_at
        # A gap between two answers while it held this request (the wait for the first answer after it was
        # idle is a latency, not a gap: a burst of requests finish about together), x the requests it held.
        if prev is not None and prev >= started:
            pace.gaps.append((now - prev) * r.stats.outstanding)

    def resend(self, task: asyncio.Task | None) -> bool:
        """A request's await was cancelled: True when this watch did it, alone (re-send it; see Frozen)."""
        if task is None or task not in self._cancelled:
            return False
        self._cancelled.discard(task)
        return task.uncancel() == 0

    # --- the watch ---------------------------------------------------------------------------

    async def run(self, probe: Probe, check_s: float = CHECK_S) -> None:
        """Until cancelled: look at every replica each `check_s`; probe the frozen ones with `probe`."""
        try:
            while True:
                await asyncio.sleep(check_s)
                self.check(probe)
        finally:
            self.close()

    def close(self) -> None:
        """The run is over: stop probing, and end a fleet silence that answers have ended since the last look."""
        for task in list(self._probes.values()):
            task.cancel()
        if self._silent_since is not None:
            self.fleet_silence(self.fleet.clock())

    def check(self, probe: Probe) -> None:
        """One look: declare the replicas that are frozen, or say that the whole fleet is silent."""
        now = self.fleet.clock()
        live = [r for r in self.fleet.replicas if r.in_rotation]
        for r in live:
            if r.outstanding and (why := self.frozen(r, live, now)) is not None:
                self.freeze(r, now, *why)
                self._probes[id(r)] = asyncio.ensure_future(self._probe_back(r, probe))
        self.fleet_silence(now)

    def frozen(self, r: Replica, live: Sequence[Replica], now: float) -> tuple[float, float] | None:
        """(silence, its bound) when `r` is frozen by the fleet's pace; else None."""
        if not r.inflight:
            return None
        oldest = next(iter(r.inflight.values()))
        last = r.stats.last_answer_at
        start = oldest if last is None else max(last, oldest)
        silence = now - start
        others = [x for x in live if x is not r and x.in_rotation]
        # Others went on answering well into its silence: had they stopped about when it did, it would be the
        # fleet's problem (fleet_silence), not its own.
        after = start + max(MIN_SILENCE_S, silence / 2)
        if silence < MIN_SILENCE_S or not any((x.stats.last_answer_at or -1e300) > after for x in others):
            return None
        if last is not None and last >= oldest:  # it answered while holding these: its rate
            gaps = [g for x in live for g in self._pace(x).gaps]
            if len(gaps) < MIN_OBSERVED:
                return None
            held = sum(1 for sent in r.inflight.values() if sent <= last)
            bound = max(MIN_SILENCE_S, self.factor * max(gaps) / held)
            return (silence, bound) if silence >= bound else None
        fleet = sorted(v for x in others for v in self._pace(x).latencies)  # no answer since it got them: ages
        if len(fleet) < MIN_OBSERVED:
            return None
        own = sorted(self._pace(r).latencies)
        own = own if len(own) >= MIN_OBSERVED else None
        f = self.factor
        owed = 0.0
        for sent in r.inflight.values():
            owed += _done_by(fleet, own, (now - sent) / f) - _done_by(fleet, own, (start - sent) / f)
        return (silence, silence) if owed >= OWED else None

    def freeze(self, r: Replica, now: float, silence: float, bound: float) -> None:
        """Take `r` out of rotation and cancel every request it holds (each is re-sent at once)."""
        s = r.stats
        s.in_rotation = False
        s.frozen = True
        r.retry_at = float("inf")  # no half-open request from the job: the probe brings it back
        held = list(r.inflight)
        s.freezes.append({"at": now, "silent_s": round(silence, 2), "bound_s": round(bound, 2), "resent": len(held)})
        del s.freezes[:-EPISODES]
        s.freeze_count += 1
        s.resent += len(held)
        log.warning(
            "replica %d (%s) is frozen: no answer for %.1fs while the other replicas answered (the bound their pace "
            "sets, x%g margin: %.1fs). Its %d request(s) are re-sent to the others now; it takes no work until a "
            "probe answers",
            r.index,
            r.endpoint,
            silence,
            self.factor,
            bound,
            len(held),
        )
        for task in held:
            if not task.done():
                self._cancelled.add(task)
                task.cancel()

    async def _probe_back(self, r: Replica, probe: Probe) -> None:
        """Probe `r` with a 1-token completion, backed off, until it answers; then it rejoins."""
        wait = PROBE_FIRST_S
        try:
            while True:
                await asyncio.sleep(wait)
                if r is not self.fleet.replicas[r.index]:
                    return  # replaced on a new address: the replacement takes the work
                fleet = [v for x in self.fleet.replicas if x is not r for v in self._pace(x).latencies]
                timeout = max(PROBE_TIMEOUT_MIN_S, sorted(fleet)[len(fleet) // 2] if fleet else 0.0)
                started = self.fleet.clock()
                try:
                    await asyncio.wait_for(probe(r, timeout), timeout)
                except Rejected:
                    pass  # a 4xx is an answer too: the server is alive
                except (TransientError, TimeoutError) as e:
                    log.debug("replica %d (%s): probe unanswered (%s)", r.index, r.endpoint, e)
                    wait = min(PROBE_MAX_S, 2 * wait)
                    continue
                self.rejoin(r, self.fleet.clock() - started)
                return
        finally:
            self._probes.pop(id(r), None)

    def rejoin(self, r: Replica, probe_s: float) -> None:
        """`r` answered a probe: it takes work again."""
        now = self.fleet.clock()
        s = r.stats
        s.frozen = False
        s.answered(now)
        if s.freezes:
            s.freezes[-1]["rejoined_at"] = now
        r.pace = None  # its pace before the freeze says nothing now
        log.warning(
            "replica %d (%s) rejoined: a probe answered in %.1fs, %.0fs after it was declared frozen",
            r.index,
            r.endpoint,
            probe_s,
            now - s.freezes[-1]["at"] if s.freezes else 0.0,
        )
        self.fleet.rotation.admit(r)

    def fleet_silence(self, now: float) -> None:
        """Say once per episode when every replica holding requests is silent (the job's problem; nobody is ejected)."""
        live = [r for r in self.fleet.replicas if r.in_rotation]
        holding = [r for r in live if r.inflight]
        last = max((r.stats.last_answer_at for r in self.fleet.replicas if r.stats.last_answer_at), default=None)
        if self._silent_since is not None and (last or -1e300) > self._silent_since:
            episode = self.fleet_silences[-1]
            episode["ended_at"] = now
            log.warning("the fleet answers again, after %.0fs of silence", now - self._silent_since)
            self._silent_since = None
        if not holding or self._silent_since is not None:
            return
        oldest = min(next(iter(r.inflight.values())) for r in holding)
        start = oldest if last is None else max(last, oldest)
        latencies = sorted(v for r in self.fleet.replicas for v in self._pace(r).latencies)
        if len(latencies) >= MIN_OBSERVED:
            bound = max(MIN_SILENCE_S, self.factor * latencies[int(0.9 * (len(latencies) - 1))])
        else:
            bound = QUIET_S
        if now - start < bound:
            return
        self._silent_since = start
        names = ", ".join(f"replica {r.index} ({r.endpoint}, {len(r.inflight)} in flight)" for r in holding)
        self.fleet_silences.append({"at": start, "replicas": [r.index for r in holding], "ended_at": None})
        del self.fleet_silences[:-EPISODES]
        log.warning(
            "no replica has answered for %.0fs: %s. The whole fleet is silent, so this is the job's problem (the "
            "network, this host, a shared device), not one replica's: none is taken out, and each request keeps "
            "its own bounds (the stall bound, the request timeout)",
            now - start,
            names,
        )

    def _pace(self, r: Replica) -> _Pace:
        return r.pace or _EMPTY


_EMPTY = _Pace()


def _done_by(fleet: list[float], own: list[float] | None, age: float) -> float:
    """The share of answers done within `age` seconds: the fleet's, or the replica's own where that is slower."""
    if age <= 0:
        return 0.0
    share = bisect_right(fleet, age) / len(fleet)
    if own is not None:
        share = min(share, bisect_right(own, age) / len(own))
    return share


def completion_probe(http: aiohttp.ClientSession, model: str) -> Probe:
    """A probe asking for one greedy token: a real generation (/health can answer while generation is wedged)."""
    body = {"model": model, "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 1, "temperature": 0}

    async def probe(r: Replica, timeout_s: float) -> object:
        return await chat(http, r.endpoint, body, timeout_s)

    return probe
