"""Which replica serves the next request: bounded windows, least outstanding, affinity; retries.

Knows nothing engine-specific: a replica is an endpoint with a window of in-flight requests (fixed,
or set while the run goes by `--concurrency auto`, see load_poll.py). A request goes to the least
loaded replica, unless its prompt has a home within a margin of that load: the replica its earlier
samples went to (a pin), else the one holding the longest leading text it shares with other
prompts (prefix_map.py); a home that is full but within the margin is waited for, by a bounded
number of requests, rather than given up.
A request is a coroutine function of the replica; the dispatcher retries it with backoff on
another replica when it fails transiently. Which replicas are in rotation (ejection, probes,
giving up with NoReplicaError, the warm-up gate) is rotation.py's; twins for stragglers in the
tail are hedging.py's; a replica frozen by the fleet's pace, its requests re-sent, is freeze.py's.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from fleetgen.generate.config.sections import RoutingConfig, TransportConfig
from fleetgen.generate.dispatch.client import Rejected, TransientError, backoff_delay
from fleetgen.generate.dispatch.freeze import FreezeWatch, Frozen
from fleetgen.generate.dispatch.hedging import Hedging
from fleetgen.generate.dispatch.prefix_map import PrefixMap
from fleetgen.generate.dispatch.replica import Replica
from fleetgen.generate.dispatch.rotation import Rotation
from fleetgen.generate.dispatch.stall import StallGuard
from fleetgen.generate.observe.stats import Clock, Stats

T = TypeVar("T")


class Dispatcher:
    """Hands out replica slots and runs requests on them; all methods run on one event loop."""

    def __init__(
        self,
        endpoints: Sequence[str],
        window: int,
        routing: RoutingConfig | None = None,
        transport: TransportConfig | None = None,
        *,
        clock: Clock = time.monotonic,
        rng: random.Random | None = None,
        stats: Stats | None = None,
    ) -> None:
        if not endpoints:
            raise ValueError("no endpoints")
        self.routing = routing = routing or RoutingConfig()
        self.transport = transport = transport or TransportConfig()
        self._least_outstanding = routing.dispatch == "least-outstanding"
        # Silence as long as hedging waits before it re-sends a request counts as "stopped answering".
        self.replicas = [Replica(i, e, window, routing.hedge_after_s) for i, e in enumerate(endpoints)]
        # Every replica this run has used, replaced ones included: what stats.json reports.
        self.all_stats = [r.stats for r in self.replicas]
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
        self.rotation = Rotation(
            self.replicas,
            clock,
            self._wake,
            failures_to_eject=transport.replica_failures,
            cooldown_s=transport.replica_cooldown_s,
            give_up_after_s=transport.give_up_after_s,
        )
        self.hedging = Hedging(self, routing.hedge_after_s, clock)
        self.stalls = StallGuard(transport.stall_factor, transport.stall_floor_s)
        self.freezes = FreezeWatch(self, transport.freeze_factor)  # its watch runs when the runner starts it
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
        self.hedging.enter_tail()

    def replace_endpoint(self, index: int, endpoint: str) -> bool:
        """Send replica `index`'s future work to `endpoint` (a replacement on a new address); False if unchanged.

        The old address keeps its own Replica object: requests still in flight there finish or fail
        against it, and never count against the replacement.
        """
        old = self.replicas[index]
        if old.endpoint == endpoint:
            return False
        new = Replica(index, endpoint, old.window, self.routing.hedge_after_s)
        self.replicas[index] = new
        self.all_stats.append(new.stats)
        self.rotation.replaced()
        if self.on_new_replica is not None:
            self.on_new_replica(new)
        self._wake()
        return True

    def forget(self, key: str) -> None:
        """The prompt behind `key` is finished: drop its affinity pin."""
        self._pins.pop(key, None)

    # --- choosing a replica -------------------------------------------------------------

    def _available(self, r: Replica, now: float) -> bool:
        if r.in_rotation:
            return r.outstanding < r.window
        # Out of rotation: after its cool-down, one request probes it (half-open).
        return not r.probing and r.outstanding == 0 and now >= r.retry_at

    def _choose(
        self, key: str | None, exclude: Replica | None = None, blocks: tuple[int, ...] = ()
    ) -> Replica | object | None:
        """A replica, None when none is free, or _WAIT_HOME: the request's home is full but within the margin."""
        if not self._least_outstanding:
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
        if not self.routing.prefix_affinity or key is None or exclude is not None:
            return best
        pins = self._pins
        home = pinned = pins.get(key)
        from_prefix = home is None and bool(blocks) and self.routing.prefix_routing
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
            r.probing = True  # the one request that probes it (rotation.py)
        r.stats.outstanding += 1
        r.stats.requests += 1
        if r.stats.first_request_at is None:
            r.stats.first_request_at = self.clock()
        return r

    def try_acquire(self, key: str | None = None, blocks: tuple[int, ...] = ()) -> Replica | None:
        """A slot on a replica if one is free now, else None; NoReplicaError once every replica is given up."""
        if self.rotation.dead:
            self.rotation.give_up()
        r = self._choose(key, blocks=blocks)
        return None if r is None or r is _WAIT_HOME else self._take(r)  # type: ignore[arg-type]

    async def acquire(self, key: str | None = None, blocks: tuple[int, ...] = ()) -> Replica:
        """A slot on a replica, waiting for one; NoReplicaError once every replica is given up."""
        for_home = False  # counted in home_waiters: the runner sends that many more requests meanwhile
        try:
            while True:
                if self.rotation.dead:
                    self.rotation.give_up()
                r = self._choose(key, blocks=blocks)
                if r is not None and r is not _WAIT_HOME:
                    return self._take(r)  # type: ignore[arg-type]
                if (r is _WAIT_HOME) != for_home:
                    for_home = not for_home
                    self.home_waiters += 1 if for_home else -1
                    if for_home and self.on_capacity is not None:
                        self.on_capacity()
                await self.changed()
        finally:
            if for_home:
                self.home_waiters -= 1

    def try_acquire_other(self, than: Replica, *, max_load: float = 1.0) -> Replica | None:
        """A free slot on another replica in rotation at most `max_load` full, without waiting (for hedging)."""
        now = self.clock()
        others = [
            r
            for r in self.replicas
            if r is not than and r.in_rotation and self._available(r, now) and r.outstanding <= max_load * r.window
        ]
        if not others:
            return None
        return self._take(min(others, key=lambda r: r.outstanding / r.window))

    def release(
        self, r: Replica, *, ok: bool = False, failure: TransientError | None = None, rejected: bool = False
    ) -> None:
        """Return a slot, with what happened: ok, a transient failure, a rejection, or none (cancelled)."""
        r.stats.outstanding -= 1
        answered = ok or rejected  # a 4xx is an answer too: the server is alive
        self.rotation.released(r, answered=answered, failure=failure)
        if answered:
            r.stats.answered(self.clock())
            if rejected:
                r.stats.rejected += 1
            else:
                r.stats.ok += 1
        elif failure is not None:
            r.stats.failures += 1
        self._wake()

    def release_after(self, r: Replica, exc: BaseException) -> None:
        """Return a slot after a request raised: a transient failure, a rejection, or anything else."""
        if isinstance(exc, TransientError):
            self.release(r, failure=exc)
        elif isinstance(exc, Rejected):
            self.release(r, rejected=True)
        else:
            self.release(r)

    def _wake(self) -> None:
        self._changed.set()

    async def changed(self) -> None:
        """Wait until a slot may have freed up or a replica's state changed."""
        self._changed.clear()
        await self._changed.wait()

    # --- running a request -----------------------------------------------------------------

    async def run(
        self,
        key: str | None,
        fn: Callable[[Replica], Awaitable[T]],
        prefix: Callable[[], tuple[int, ...]] | None = None,
        *,
        max_tokens: int | None = None,
        tokens_of: Callable[[T], int] | None = None,
    ) -> tuple[T, Replica]:
        """Run `fn` on a replica until it answers: retries transient failures elsewhere with backoff.

        `prefix` gives the request's leading-text block hashes (prefix_map.prefix_blocks), called only when
        its key has no pin yet. With `max_tokens` (its budget) and `tokens_of` (the tokens an answer holds), a
        request left unanswered past the bound its replica's pace sets is cancelled and re-sent (stall.py).
        Rejected (4xx) propagates at once; after max_attempts the last TransientError propagates.
        """
        attempt = 0
        while True:
            try:
                return await self._run_once(key, fn, prefix, max_tokens, tokens_of)
            except Frozen:  # its replica froze: re-sent at once, and it costs the request no attempt
                if self.run_stats is not None:
                    self.run_stats.retries += 1
                continue
            except TransientError as e:
                attempt += 1
                t = self.transport
                if attempt >= t.max_attempts:
                    raise
                if self.run_stats is not None:
                    self.run_stats.retries += 1
                delay = backoff_delay(attempt - 1, t.backoff_base_s, t.backoff_max_s, self.rng)
                if e.retry_after is not None:
                    delay = max(delay, min(e.retry_after, t.backoff_max_s))
                await asyncio.sleep(delay)

    async def _run_once(
        self,
        key: str | None,
        fn: Callable[[Replica], Awaitable[T]],
        prefix: Callable[[], tuple[int, ...]] | None = None,
        max_tokens: int | None = None,
        tokens_of: Callable[[T], int] | None = None,
    ) -> tuple[T, Replica]:
        p = self.routing
        blocks = (
            prefix() if prefix is not None and p.prefix_routing and p.prefix_affinity and key not in self._pins else ()
        )
        r = self.try_acquire(key, blocks) or await self.acquire(
            key, blocks
        )  # no coroutine to await when a slot is free
        started = self.clock()
        task = asyncio.current_task()
        r.inflight[task] = started  # until its await ends: what freeze.py cancels and re-sends
        # The request is awaited directly, with no task of its own: a twin can join it only in the tail (hedging.py).
        flight = self.hedging.track(r, started, fn) if p.hedge else None
        bound = self.stalls.bound_s(r, max_tokens) if max_tokens is not None else None
        try:
            try:
                result = await (fn(r) if bound is None else self.stalls.within(bound, r, fn, max_tokens))  # type: ignore[arg-type]
            finally:
                del r.inflight[task]
        except asyncio.CancelledError:
            if self.freezes.resend(task):  # its replica was declared frozen, and nobody else cancelled it
                r.stats.silent += 1
                self.release(r)
                frozen = Frozen(f"replica {r.index} ({r.endpoint}) froze; re-sent")
                if flight is None:
                    raise frozen from None
                return await self.hedging.first_failed(flight, frozen)  # type: ignore[return-value]
            if flight is None:
                r.stats.silent += 1
                self.release(r)  # no outcome: the run is abandoning it
                raise
            if not self.hedging.first_cancelled(flight):  # (it returns the slot)
                raise
            return flight.twin_answer()  # type: ignore[return-value]
        except BaseException as exc:
            self.release_after(r, exc)
            if flight is None:
                raise
            return await self.hedging.first_failed(flight, exc)  # type: ignore[return-value]
        if flight is not None and (twin := self.hedging.first_answered(flight)) is not None:
            return twin  # type: ignore[return-value]  # the twin won; fn swallowed the cancel its answer sent
        self.freezes.answered(r, started, self.clock())  # before release: it reads the previous answer's time
        self.release(r, ok=True)
        took = self.observe(r, started)
        if tokens_of is not None:
            self.stalls.observe(r, took, tokens_of(result))
        return result, r

    def observe(self, r: Replica, started: float) -> float:
        """`r` answered a request sent at `started`: its latency histogram, and what hedging calls slow; the latency."""
        took = self.clock() - started
        self.hedging.latencies.append(took)
        r.stats.latency.observe(took)
        return took


# _choose's answer when a request's home is full but within the margin: wait for it.
_WAIT_HOME = object()
