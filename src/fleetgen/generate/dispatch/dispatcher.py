"""Which replica serves the next request: bounded windows, least outstanding, affinity, hedging, ejection.

Knows nothing engine-specific: a replica is an endpoint with a window of in-flight requests (fixed,
or set while the run goes by `--concurrency auto`, see load_poll.py). A request goes to the least
loaded replica, unless its prompt has a home within a margin of that load: the replica its earlier
samples went to (a pin), else the one holding the longest leading text it shares with other
prompts (prefix_map.py); a home that is full but within the margin is waited for, by a bounded
number of requests, rather than given up.
A request is a coroutine function of the replica; the dispatcher retries it with backoff on
another replica when it fails transiently, takes replicas that keep failing out of rotation
(and lets one request probe them again after a cool-down), and stops with NoReplicaError
when none has answered for `give_up_after_s`.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from fleetgen.errors import NoReplicaError
from fleetgen.generate.dispatch.client import Rejected, TransientError, backoff_delay
from fleetgen.generate.dispatch.prefix_map import PrefixMap
from fleetgen.generate.observe.stats import Clock, ReplicaStats, Stats

T = TypeVar("T")

MAX_COOLDOWN_S = 60.0


# Hedging waits for this many answers before it calls a request slow, and twins only onto a replica at
# most this full (see Dispatcher._hedge_later; bench/router_race.py showed why).
HEDGE_MIN_OBSERVED = 8
HEDGE_MAX_LOAD = 0.5


@dataclass
class DispatchPolicy:
    """The knobs of dispatch; GenerateConfig fills them."""

    least_outstanding: bool = True
    prefix_affinity: bool = True
    prefix_routing: bool = True  # across prompts, by shared leading text (needs prefix_affinity)
    hedge: bool = True
    hedge_after_s: float = 10.0
    max_attempts: int = 6
    backoff_base_s: float = 0.5
    backoff_max_s: float = 30.0
    failures_to_eject: int = 3
    cooldown_s: float = 5.0
    give_up_after_s: float = 120.0


class Replica:
    """One server as the dispatcher sees it; its counters live in `stats`."""

    def __init__(self, index: int, endpoint: str, window: int, stall_after_s: float = 10.0) -> None:
        self.index = index
        self.endpoint = endpoint
        self.window = window
        self.stats = ReplicaStats(index=index, endpoint=endpoint, window=window, stall_after_s=stall_after_s)
        self.consecutive_failures = 0
        self.retry_at = 0.0  # when out of rotation: earliest time a probe request may go
        self.cooldown = 0.0
        self.probing = False

    @property
    def outstanding(self) -> int:
        return self.stats.outstanding

    @property
    def in_rotation(self) -> bool:
        return self.stats.in_rotation

    def __repr__(self) -> str:
        return f"Replica({self.index}, {self.endpoint}, {self.outstanding}/{self.window})"


class Dispatcher:
    """Hands out replica slots and runs requests on them; all methods run on one event loop."""

    def __init__(
        self,
        endpoints: Sequence[str],
        window: int,
        policy: DispatchPolicy,
        *,
        clock: Clock = time.monotonic,
        rng: random.Random | None = None,
        stats: Stats | None = None,
    ) -> None:
        if not endpoints:
            raise ValueError("no endpoints")
        # Silence as long as hedging waits before it re-sends a request counts as "stopped answering".
        self.replicas = [Replica(i, e, window, policy.hedge_after_s) for i, e in enumerate(endpoints)]
        # Every replica this run has used, replaced ones included: what stats.json reports.
        self.all_stats = [r.stats for r in self.replicas]
        self.policy = policy
        self.run_stats = stats  # where retries are counted, when a run owns this dispatcher
        self.clock = clock
        self.rng = rng or random.Random()
        self._changed = asyncio.Event()
        self._pins: OrderedDict[str, Replica] = OrderedDict()
        self._prefixes: PrefixMap[Replica] = PrefixMap()
        self._capacity = sum(r.window for r in self.replicas)
        self._max_pins = max(1024, 8 * self.capacity)
        # Requests waiting for their full home replica (see _choose), and who to tell when more can go out.
        self.home_waiters = 0
        self.on_capacity: Callable[[], None] | None = None
        self._rr = 0
        self._latencies: deque[float] = deque(maxlen=256)
        self._in_tail = False
        # Hedged requests in flight before the tail, each with its request function: the tail watches them.
        self._flights: dict[_Flight, Callable[[Replica], Awaitable[object]]] = {}
        self._all_down_since: float | None = None
        self._dead: str | None = None
        # Called with each replica that joins on a new address (warmup.py holds and warms it).
        self.on_new_replica: Callable[[Replica], None] | None = None

    @property
    def capacity(self) -> int:
        """Requests all replicas take at once: how many the runner keeps in flight."""
        return self._capacity

    def set_window(self, index: int, window: int) -> None:
        """Replica `index` now takes `window` requests at once (from --concurrency auto); more can go out at once."""
        r = self.replicas[index]
        if window == r.window:
            return
        grew = window > r.window
        self._capacity += window - r.window
        r.window = r.stats.window = window
        r.stats.window_min = min(r.stats.window_min, window)
        r.stats.window_max = max(r.stats.window_max, window)
        if grew:
            self._wake()
            if self.on_capacity is not None:
                self.on_capacity()

    def enter_tail(self) -> None:
        """The input is exhausted: from now on stragglers may be hedged."""
        if not self._in_tail:
            self._in_tail = True
            for flight, fn in list(self._flights.items()):
                self._watch(flight, fn)
            self._flights.clear()

    def replace_endpoint(self, index: int, endpoint: str) -> bool:
        """Send replica `index`'s future work to `endpoint` (a replacement on a new address); False if unchanged.

        The old address keeps its own Replica object: requests still in flight there finish or fail
        against it, and never count against the replacement.
        """
        old = self.replicas[index]
        if old.endpoint == endpoint:
            return False
        new = Replica(index, endpoint, old.window, self.policy.hedge_after_s)
        self.replicas[index] = new
        self.all_stats.append(new.stats)
        self._all_down_since = None
        if self.on_new_replica is not None:
            self.on_new_replica(new)
        self._wake()
        return True

    # --- the warm-up gate (warmup.py) ------------------------------------------------------

    def hold(self, r: Replica) -> None:
        """Keep `r` out of rotation until `admit`: it is compiling the job's sampling kernels."""
        r.stats.in_rotation = False
        r.stats.warming = True
        r.retry_at = float("inf")

    def admit(self, r: Replica) -> None:
        """`r` answered its warm-up: it takes work from now on."""
        r.stats.warming = False
        r.stats.in_rotation = True
        r.retry_at = 0.0
        self._all_down_since = None
        self._wake()

    def warmup_failed(self, r: Replica, why: str) -> None:
        """`r` stays out of this run; when every replica failed so, the run stops (NoReplicaError)."""
        r.stats.warming = False
        r.stats.warmup_error = why
        if all(x.stats.warmup_error for x in self.replicas):
            self._dead = "no replica finished its warm-up: " + "; ".join(x.stats.warmup_error or "" for x in self.replicas)
            self._wake()

    def forget(self, key: str) -> None:
        """The prompt behind `key` is finished: drop its affinity pin."""
        self._pins.pop(key, None)

    # --- choosing a replica -------------------------------------------------------------

    def _available(self, r: Replica, now: float) -> bool:
        if r.in_rotation:
            return r.outstanding < r.window
        # Out of rotation: after its cool-down, one request probes it (half-open).
        return not r.probing and r.outstanding == 0 and now >= r.retry_at

    def _choose(self, key: str | None, exclude: Replica | None = None, blocks: tuple[int, ...] = ()) -> Replica | object | None:
        """A replica, None when none is free, or _WAIT_HOME: the request's home is full but within the margin."""
        if not self.policy.least_outstanding:
            return self._choose_round_robin(self.clock(), exclude)
        # The least loaded available replica, lowest index first among equals; load is relative to the
        # window, so replicas of different sizes fill alike. One pass, no list: this runs per request.
        best: Replica | None = None
        best_load = 2.0
        now: float | None = None
        for r in self.replicas:
            s = r.stats
            if s.in_rotation:
                if s.outstanding >= r.window or r is exclude:
                    continue
            else:  # out of rotation: after its cool-down, one request probes it (half-open)
                if now is None:
                    now = self.clock()
                if r.probing or s.outstanding or now < r.retry_at or r is exclude:
                    continue
            load = s.outstanding / r.window
            if load < best_load:
                best, best_load = r, load
        if best is None:
            return None
        if not self.policy.prefix_affinity or key is None or exclude is not None:
            return best
        pins = self._pins
        home = pinned = pins.get(key)
        from_prefix = home is None and bool(blocks) and self.policy.prefix_routing
        if from_prefix:
            found = self._prefixes.longest(blocks)
            home = found[0] if found is not None else None
        chosen = best
        live = home is not None and home.stats.in_rotation and home is self.replicas[home.index]  # not since replaced
        if live:
            slack = max(2, home.window // 8)  # type: ignore[union-attr]
            # Affinity yields to balance once the home is clearly busier than the least loaded replica.
            if home.outstanding <= best.outstanding * home.window / best.window + slack:  # type: ignore[union-attr]
                if home.outstanding < home.window:  # type: ignore[union-attr]
                    chosen = home  # type: ignore[assignment]
                elif self.home_waiters < slack * len(self.replicas):
                    return _WAIT_HOME  # its slots free up soon, and the other replicas are nearly as full
        if chosen is not pinned:
            pins[key] = chosen
            if len(pins) > self._max_pins:
                pins.popitem(last=False)
        pins.move_to_end(key)
        if from_prefix:
            self._prefixes.record(blocks, chosen, take_over=chosen is home or not live)
        return chosen

    def _choose_round_robin(self, now: float, exclude: Replica | None) -> Replica | None:
        """Next replica in turn, waiting for it even when another is idle (the baseline we beat)."""
        n = len(self.replicas)
        for step in range(n):
            r = self.replicas[(self._rr + step) % n]
            if r is exclude or not (r.in_rotation or now >= r.retry_at):
                continue
            if self._available(r, now):
                self._rr = (self._rr + step + 1) % n
                return r
            return None  # its turn, but full: wait for it
        return None

    def _take(self, r: Replica) -> Replica:
        if not r.in_rotation:
            r.probing = True
        r.stats.outstanding += 1
        r.stats.requests += 1
        if r.stats.first_request_at is None:
            r.stats.first_request_at = self.clock()
        return r

    def try_acquire(self, key: str | None = None, blocks: tuple[int, ...] = ()) -> Replica | None:
        """A slot on a replica if one is free now, else None; NoReplicaError once every replica is given up."""
        if self._dead:
            raise NoReplicaError(self._dead, hint="start or fix the servers, then run the same command to resume")
        r = self._choose(key, blocks=blocks)
        return None if r is None or r is _WAIT_HOME else self._take(r)  # type: ignore[arg-type]

    async def acquire(self, key: str | None = None, blocks: tuple[int, ...] = ()) -> Replica:
        """A slot on a replica, waiting for one; NoReplicaError once every replica is given up."""
        for_home = False  # counted in home_waiters: the runner sends that many more requests meanwhile
        try:
            while True:
                if self._dead:
                    raise NoReplicaError(self._dead, hint="start or fix the servers, then run the same command to resume")
                r = self._choose(key, blocks=blocks)
                if r is not None and r is not _WAIT_HOME:
                    return self._take(r)  # type: ignore[arg-type]
                if (r is _WAIT_HOME) != for_home:
                    for_home = not for_home
                    self.home_waiters += 1 if for_home else -1
                    if for_home and self.on_capacity is not None:
                        self.on_capacity()
                self._changed.clear()
                await self._changed.wait()
        finally:
            if for_home:
                self.home_waiters -= 1

    def try_acquire_other(self, than: Replica, *, max_load: float = 1.0) -> Replica | None:
        """A free slot on another replica in rotation at most `max_load` full, without waiting (for hedging)."""
        now = self.clock()
        others = [
            r for r in self.replicas
            if r is not than and r.in_rotation and self._available(r, now) and r.outstanding <= max_load * r.window
        ]
        if not others:
            return None
        return self._take(min(others, key=lambda r: r.outstanding / r.window))

    def release(self, r: Replica, *, ok: bool = False, failure: TransientError | None = None, rejected: bool = False) -> None:
        """Return a slot, with what happened: ok, a transient failure, a rejection, or none (cancelled)."""
        r.stats.outstanding -= 1
        was_probe = r.probing
        r.probing = False
        if ok or rejected:
            # A 4xx is an answer too: the server is alive.
            r.consecutive_failures = 0
            if not r.in_rotation:
                r.stats.in_rotation = True
                r.cooldown = 0.0
            self._all_down_since = None
            r.stats.answered(self.clock())
            if rejected:
                r.stats.rejected += 1
            else:
                r.stats.ok += 1
        elif failure is not None:
            r.stats.failures += 1
            if failure.counts_against_replica:
                r.consecutive_failures += 1
                if was_probe or (r.in_rotation and r.consecutive_failures >= self.policy.failures_to_eject):
                    self._eject(r)
        self._wake()

    def _eject(self, r: Replica) -> None:
        r.stats.in_rotation = False
        r.stats.ejections += 1
        r.cooldown = min(MAX_COOLDOWN_S, r.cooldown * 2 if r.cooldown else self.policy.cooldown_s)
        r.retry_at = self.clock() + r.cooldown
        loop = asyncio.get_running_loop()
        loop.call_later(r.cooldown, self._cooldown_over, r)
        if not any(x.in_rotation or x.stats.warming for x in self.replicas) and self._all_down_since is None:
            self._all_down_since = self.clock()
            loop.call_later(self.policy.give_up_after_s, self._check_dead)

    def _check_dead(self) -> None:
        if self._all_down_since is None or any(x.in_rotation or x.stats.warming for x in self.replicas):
            return
        down_for = self.clock() - self._all_down_since
        if down_for >= self.policy.give_up_after_s * 0.999:
            self._dead = (
                f"no replica has answered for {down_for:.0f}s "
                f"({', '.join(r.endpoint for r in self.replicas)}); stopped cleanly, the job can be resumed"
            )
            self._wake()
        else:
            asyncio.get_running_loop().call_later(self.policy.give_up_after_s - down_for, self._check_dead)

    def _cooldown_over(self, r: Replica) -> None:
        # A loop's timer can fire before our clock reaches retry_at (uvloop counts whole milliseconds):
        # waking then would find the replica still cooling and nothing would wake the waiters again.
        left = r.retry_at - self.clock()
        if left > 0 and not r.in_rotation:
            asyncio.get_running_loop().call_later(max(left, 0.001), self._cooldown_over, r)
        else:
            self._wake()

    def _wake(self) -> None:
        self._changed.set()

    # --- running a request -----------------------------------------------------------------

    async def run(
        self, key: str | None, fn: Callable[[Replica], Awaitable[T]], prefix: Callable[[], tuple[int, ...]] | None = None,
    ) -> tuple[T, Replica]:
        """Run `fn` on a replica until it answers: retries transient failures elsewhere with backoff.

        `prefix` gives the request's leading-text block hashes (prefix_map.prefix_blocks), called only when
        its key has no pin yet. Rejected (4xx) propagates at once; after max_attempts the last TransientError propagates.
        """
        attempt = 0
        while True:
            try:
                return await self._run_once(key, fn, prefix)
            except TransientError as e:
                attempt += 1
                if attempt >= self.policy.max_attempts:
                    raise
                if self.run_stats is not None:
                    self.run_stats.retries += 1
                delay = backoff_delay(attempt - 1, self.policy.backoff_base_s, self.policy.backoff_max_s, self.rng)
                if e.retry_after is not None:
                    delay = max(delay, min(e.retry_after, self.policy.backoff_max_s))
                await asyncio.sleep(delay)

    async def _run_once(
        self, key: str | None, fn: Callable[[Replica], Awaitable[T]], prefix: Callable[[], tuple[int, ...]] | None = None,
    ) -> tuple[T, Replica]:
        p = self.policy
        blocks = prefix() if prefix is not None and p.prefix_routing and p.prefix_affinity and key not in self._pins else ()
        r = self.try_acquire(key, blocks) or await self.acquire(key, blocks)  # no coroutine to await when a slot is free
        started = self.clock()
        # The request is awaited directly, with no task or wait of its own: a twin can join it only in the
        # tail, through a watcher task (see _hedge_later) that the tail starts for each request in flight.
        flight = _Flight(r, started) if self.policy.hedge else None
        if flight is not None:
            if self._in_tail:
                self._watch(flight, fn)
            else:
                self._flights[flight] = fn
        try:
            result = await fn(r)
        except asyncio.CancelledError:
            if flight is None:
                r.stats.silent += 1
                self.release(r)  # no outcome: the run is abandoning it
                raise
            if not self._after_cancel(flight):  # (it returns the slot)
                raise
            return flight.twin.result(), flight.twin_replica  # type: ignore[union-attr,return-value]
        except BaseException as exc:
            self._release_after(r, exc)
            if flight is None:
                raise
            return await self._after_failure(flight, exc)
        if flight is not None:
            self._leave(flight)
            if flight.state is _TWIN_WON:  # fn swallowed the cancel that the twin's answer sent it
                flight.task.uncancel()  # type: ignore[union-attr]
                r.stats.silent += 1
                self.release(r)
                return flight.twin.result(), flight.twin_replica  # type: ignore[union-attr,return-value]
        self.release(r, ok=True)
        self._observe(r, started)
        return result, r

    def _observe(self, r: Replica, started: float) -> None:
        took = self.clock() - started
        self._latencies.append(took)
        r.stats.latency.observe(took)

    def _leave(self, flight: _Flight) -> None:
        """The first request is over (answered, failed or cancelled): no twin may start or win any more."""
        self._flights.pop(flight, None)
        if flight.state is _RACING:
            flight.state = _OVER
        if flight.watcher is not None:
            flight.watcher.cancel()  # no effect once it started the twin (it has returned)
        if flight.twin is not None and flight.state is _OVER:
            flight.twin.cancel()  # the losing hedge: closing its connection makes the server abort it

    def _after_cancel(self, flight: _Flight) -> bool:
        """The first request was cancelled: True if by its twin's answer (take that), False if from outside."""
        won = flight.state is _TWIN_WON
        self._leave(flight)
        flight.replica.stats.silent += 1  # it got no answer there: its twin's came first, or the run abandons it
        self.release(flight.replica)
        # Cancelled from outside as well (the count stays above 0): the run is abandoning it.
        return won and flight.task.uncancel() == 0  # type: ignore[union-attr]

    async def _after_failure(self, flight: _Flight, exc: BaseException) -> tuple[T, Replica]:
        """The first request failed: a twin in flight may still answer (its error then propagates instead)."""
        twin = flight.twin
        if flight.state is _TWIN_WON:  # fn turned the cancel that the twin's answer sent it into an error
            self._leave(flight)
            flight.task.uncancel()  # type: ignore[union-attr]
            return twin.result(), flight.twin_replica  # type: ignore[union-attr,return-value]
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
        return twin.result(), flight.twin_replica  # type: ignore[return-value]

    def _watch(self, flight: _Flight, fn: Callable[[Replica], Awaitable[object]]) -> None:
        flight.watcher = asyncio.ensure_future(self._hedge_later(flight, fn))

    async def _hedge_later(self, flight: _Flight, fn: Callable[[Replica], Awaitable[object]]) -> None:
        """In the tail, a request slower than the hedge threshold gets a twin on a draining replica.

        Slow is judged against answers seen: until HEDGE_MIN_OBSERVED requests have answered, no twin is
        sent (a job that fits in the window is all "tail" from its first second, and a flat threshold twinned
        most of its requests). A twin is a full prefill on a replica without the prompt's prefix, so it goes
        only to a replica at most HEDGE_MAX_LOAD full, where it costs little of the batch.
        """
        while True:
            known = len(self._latencies) >= HEDGE_MIN_OBSERVED
            threshold = max(self.policy.hedge_after_s, 2 * statistics.median(self._latencies)) if known else self.policy.hedge_after_s
            remaining = threshold - (self.clock() - flight.started)
            if known and remaining <= 0:
                break
            await asyncio.sleep(remaining if remaining > 0 else self.policy.hedge_after_s / 4)  # then judge again
        while (other := self.try_acquire_other(flight.replica, max_load=HEDGE_MAX_LOAD)) is None:
            # No other replica has drained enough: try again when a slot frees up (cancelled if the request answers first).
            self._changed.clear()
            await self._changed.wait()
        other.stats.hedges += 1
        flight.twin_replica = other
        flight.twin = twin = asyncio.ensure_future(fn(other))
        twin.add_done_callback(lambda t: self._twin_done(flight, t))
        flight.watcher = None

    def _twin_done(self, flight: _Flight, twin: asyncio.Future) -> None:
        """Return the twin's slot, exactly once; if it answered while the first still runs, it wins."""
        other = flight.twin_replica
        assert other is not None
        if twin.cancelled():
            self.release(other)
            return
        exc = twin.exception()
        if exc is not None:
            self._release_after(other, exc)  # the first request goes on (or, if it failed too, this error ends it)
            return
        if flight.state is _OVER:
            other.stats.answered(self.clock())
            self.release(other)  # answered too, but the first answer already won
            return
        self.release(other, ok=True)
        self._observe(other, flight.started)
        if flight.state is _RACING and flight.task is not None:  # (None: run outside a task, nothing to cancel)
            flight.state = _TWIN_WON
            flight.replica.stats.moved += 1
            flight.replica.stats.silent_moved += 1
            flight.task.cancel()  # the first request is still inside `await fn(r)`: the cancel lands there

    def _release_after(self, r: Replica, exc: BaseException) -> None:
        """Return a slot after a request raised: a transient failure, a rejection, or anything else."""
        if isinstance(exc, TransientError):
            self.release(r, failure=exc)
        elif isinstance(exc, Rejected):
            self.release(r, rejected=True)
        else:
            self.release(r)


# _choose's answer when a request's home is full but within the margin: wait for it.
_WAIT_HOME = object()

# What a hedged request's first attempt is doing (see Dispatcher._run_once).
_RACING, _FIRST_FAILED, _TWIN_WON, _OVER = "racing", "first failed", "twin won", "over"


class _Flight:
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
