"""`--concurrency auto`: each replica's in-flight limit follows what its engine reports.

A fixed limit is a guess: too low leaves the engine's batch half empty, too high fills its
waiting queue and, on long answers, its KV cache, which then preempts (recomputes) running
requests. The controller keeps the engine busy with a short queue and no preemption:

- the engine queues well over a short queue (`waiting` above `cut_queue_factor` x `queue_target`)
  and its batch is steady (neither filling nor emptied by a wave of answers that ended together): it
  runs all it can, so the limit comes down to our share of what it runs plus that short queue;
- it preempted requests since the last reading: the limit is cut by what it shows it over-admitted
  (`preempt_weight` x the requests preempted, at most down to x `backoff`), once per `hold_s` and only
  once what is in flight has drained to the limit; that level is then approached slowly. A cut in
  proportion, not a halving: SGLang retracts a few requests now and then by design (its admission
  grows bolder until one is retracted), and a 30% cut for each cost it a quarter of its batch;
- its KV cache is nearly full (`kv_high`): it runs all its cache holds and admits from its queue as
  the cache frees, so only a queue is added (`full_queue_fraction`, deeper: one finished long answer
  frees room for several new requests at once); unless a level near this one preempted lately
  (`congested_at`, forgotten after `forget_s` without preemption), then the limit holds;
- an engine that reports no waiting queue keeps the starting limit (nothing says when it is full),
  and none grows while much of what we sent has not reached its scheduler yet (a front-end backlog);
- otherwise, while we are what limits it (our in-flight requests at the limit), the limit grows:
  doubling until the first sign of congestion (slow start), then by `grow_fraction` a reading,
  never past what the KV cache would hold at the usage it reports now (`kv_target`), and, once the
  engine queues some, only by what fills its queue up to the target;
- never past the ceiling: the policy's, or less where the engine states a batch size past which it
  runs slower (`bound`: an SGLang server's CUDA-graph batch size, graph_bound.py).

Pure logic with an injected clock: the poller (load_poll.py) feeds it readings, tests feed it
synthetic ones.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from fleetgen.generate.observe.stats import Clock


@dataclass(frozen=True)
class Reading:
    """What one engine reported at one poll; None where it does not report it."""

    running: float | None = None
    waiting: float | None = None
    kv_usage: float | None = None  # 0..1
    preempted: float = 0.0  # requests preempted (vLLM) or retracted (SGLang) since the previous reading


@dataclass(frozen=True)
class LimitPolicy:
    """The controller's knobs; the defaults are what bench/auto_concurrency.py was run with."""

    floor: int = 4
    start: int = 16  # then doubling each poll: a few seconds to any size, and no flood of a small KV cache
    ceiling: int = 1024
    queue_min: int = 4  # the engine's waiting queue we aim for: max(queue_min, queue_fraction x running)
    queue_fraction: float = 0.125
    full_queue_fraction: float = 0.25  # the same once its KV cache is full (`kv_high`)
    cut_queue_factor: float = 2.0
    backoff: float = 0.7
    preempt_weight: float = 2.0  # a preempted request, and one more that will need the room as it grows
    grow_fraction: float = 0.125
    kv_high: float = 0.95
    kv_target: float = 0.9
    hold_s: float = 3.0  # after a cut, no growth and no second cut for this long (the cut takes effect slowly)
    near_congestion: float = 0.9  # past this share of the level that last preempted, grow by 1 per hold_s
    forget_s: float = 60.0  # a level that preempted is approached slowly for this long after its last preemption

    def queue_target(self, running: float, kv_full: bool = False) -> int:
        return max(self.queue_min, math.ceil((self.full_queue_fraction if kv_full else self.queue_fraction) * running))


class LimitController:
    """One replica's limit; `update` takes a reading and the requests we hold there, returns the new limit."""

    def __init__(self, start: int, policy: LimitPolicy = LimitPolicy(), clock: Clock = time.monotonic) -> None:
        self.policy = policy
        self.clock = clock
        # The most this replica may hold: the policy's, or less where its engine says more would be slower
        # (bound(): an SGLang server decodes a batch past its CUDA-graph size without graphs).
        self.ceiling = policy.ceiling
        self.limit = min(max(start, policy.floor), self.ceiling)
        self.slow_start = True
        self.congested_at: int | None = None  # the level that last preempted: approached slowly
        self._cut_at: float | None = None
        self._grew_at: float | None = None
        self._preempted_at: float | None = None
        self._running: float | None = None  # what the engine ran at the previous reading
        self.last_reason = "start"

    def bound(self, ceiling: int) -> None:
        """Never hold more than `ceiling` here (at least the floor); a limit above it comes down now."""
        self.ceiling = max(self.policy.floor, min(self.policy.ceiling, ceiling))
        if self.limit > self.ceiling:
            self.limit = self.ceiling
            self.last_reason = "engine bound"

    def _cut(self, to: int, reason: str) -> None:
        self.limit = max(self.policy.floor, min(self.limit, to))
        self.slow_start = False
        self._cut_at = self.clock()
        self.last_reason = reason

    def _since(self, t: float | None) -> float:
        return float("inf") if t is None else self.clock() - t

    def update(self, reading: Reading, in_flight: int) -> int:
        p = self.policy
        running, waiting, kv = reading.running, reading.waiting, reading.kv_usage
        # What we sent that the engine's scheduler does not count yet: in its front end (templating,
        # tokenizing) or on the wire. Not a sign the engine is full (its batch may be filling), but no
        # reason to send more either.
        backlog = in_flight - (running or 0) - (waiting or 0)
        # A lower limit takes effect only once what is in flight has drained to it: until then, no second cut.
        settled = in_flight <= self.limit
        # While its batch still grows the engine is taking its queue in (prefill is admitted a budget per
        # step): a queue then says nothing about what it can run. Nor while it shrinks: a wave of requests
        # finished together (answers of one length) and their successors wait to be admitted.
        filling = running is not None and (
            self._running is None  # a first reading: nothing to compare yet
            or running > self._running + p.queue_target(self._running)
        )
        steady = (
            running is not None
            and self._running is not None
            and abs(running - self._running) <= p.queue_target(self._running)
        )
        self._running = running
        kv_full = kv is not None and kv >= p.kv_high
        if self.congested_at is not None and self._since(self._preempted_at) >= p.forget_s:
            self.congested_at = None  # answers change over a job: what preempted a minute ago is tried again
        queue_target = p.queue_target(running or 0, kv_full)
        queued = running is not None and waiting is not None and waiting > queue_target
        if queued and filling:
            self.last_reason = "engine batch filling"
        target = None  # what the engine shows it runs of ours, plus a short queue
        if running is not None and waiting is not None:
            total = running + waiting
            # Our share of the engine's requests: other clients may use it too (or other shards of this job).
            share = min(1.0, in_flight / total) if total > 0 else 1.0
            target = math.ceil((running + queue_target) * share)
        overfull = queued and waiting > p.cut_queue_factor * queue_target
        if overfull and steady and target is not None and target < self.limit:
            self._cut(target, "engine queue")  # a measurement, not a guess: applies even while an earlier cut drains
            settled = in_flight <= self.limit
        if reading.preempted > 0:
            self._preempted_at = self.clock()
            if settled and self._since(self._cut_at) >= p.hold_s:
                base = min(self.limit, max(in_flight, 1))
                self.congested_at = base
                over = math.ceil(p.preempt_weight * reading.preempted)
                self._cut(max(math.floor(base * p.backoff), base - over), "preemption")
            return self.limit
        if target is not None and target > self.limit and (queued or not settled) and self.congested_at is None:
            # The engine runs more of ours than the limit (a cut made while its batch was filling slowly):
            # the limit follows it. Not after a preemption: what runs then is more than its cache holds.
            self.limit = min(target, self.ceiling)
            self.last_reason = "engine runs more"
            return self.limit
        if queued:
            return self.limit
        if kv_full and (waiting is None or self.congested_at is not None):
            self.last_reason = "kv cache full"  # no queue reported, or a queue here preempted lately
            return self.limit
        if waiting is None:
            self.last_reason = "no queue reported"
            return self.limit  # without the engine's queue nothing says when it is full: stay where we started
        if backlog > p.queue_target(running or 0):
            self.last_reason = "front-end backlog"
            return self.limit
        if not settled or self._since(self._cut_at) < p.hold_s or in_flight < self.limit - max(1, self.limit // 8):
            return self.limit  # a cut is settling, or the job gives the replica less than its limit (the tail)
        grow = self.limit if self.slow_start else max(1, math.ceil(self.limit * p.grow_fraction))
        if self.congested_at is not None:
            if self.limit >= 1.5 * self.congested_at:
                self.congested_at = None  # well past it without preemption: the answers got shorter
            elif self.limit + grow >= p.near_congestion * self.congested_at:
                if self._since(self._grew_at) < p.hold_s:
                    return self.limit
                # Preemption shows only once the requests let in have grown long: creep up, one at a time.
                grow = max(1, min(grow, math.ceil(p.near_congestion * self.congested_at) - self.limit))
        if waiting > 0 or kv_full:  # it runs all it can (its batch or its cache is full): only fill its queue
            grow = min(grow, queue_target - math.ceil(waiting))
            if grow <= 0:
                self.last_reason = "queue at target"
                return self.limit
        elif kv is not None and kv > 0:
            # At steady state KV use scales with requests held: do not grow past what would fill kv_target.
            grow = min(grow, max(1, math.floor(self.limit * (p.kv_target / kv - 1))))
        self.limit = min(self.ceiling, self.limit + grow)
        self._grew_at = self.clock()
        self.last_reason = "grow"
        return self.limit
