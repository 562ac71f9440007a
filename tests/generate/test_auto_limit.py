"""The --concurrency auto controller on synthetic engine readings, with an injected clock (no timing)."""

from __future__ import annotations

import math

from fleetgen.generate.dispatch.auto_limit import LimitController, LimitPolicy, Reading


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def controller(start=8, **kw) -> tuple[LimitController, FakeClock]:
    clock = FakeClock()
    return LimitController(start, LimitPolicy(**kw), clock), clock


def test_slow_start_doubles_while_the_engine_has_room_and_we_fill_the_limit():
    c, clock = controller(start=8)
    seen = []
    for _ in range(4):
        clock.t += 1
        seen.append(c.update(Reading(running=c.limit, waiting=0, kv_usage=0.01), in_flight=c.limit))
    assert seen == [16, 32, 64, 128]


def test_no_growth_when_the_job_gives_less_than_the_limit_or_no_queue_is_reported():
    c, clock = controller(start=64)
    clock.t += 1
    assert c.update(Reading(running=20, waiting=0, kv_usage=0.1), in_flight=20) == 64  # the tail: 20 of 64 used
    assert (
        c.update(Reading(running=64, waiting=None, kv_usage=None), in_flight=64) == 64
    )  # a server without a queue gauge


def test_growth_only_fills_the_engine_queue_up_to_its_target():
    c, clock = controller(start=100)
    c.slow_start = False
    clock.t += 1
    # it runs 96 and queues 4 of ours: its queue target is 12, so 8 more, not the usual 12.5%
    assert c.update(Reading(running=96, waiting=4, kv_usage=0.2), in_flight=100) == 108
    clock.t += 1
    assert c.update(Reading(running=96, waiting=12, kv_usage=0.2), in_flight=108) == 108  # at target: hold


def test_an_engine_queue_brings_the_limit_to_what_it_runs_plus_a_short_queue():
    c, clock = controller(start=256)
    clock.t += 1
    # the engine runs 96 at most (its max running requests); 160 of ours wait there
    full = Reading(running=96, waiting=160, kv_usage=0.3)
    assert c.update(full, in_flight=256) == 256  # a first reading: is its batch still filling? one more
    clock.t += 1
    assert c.update(full, in_flight=256) == 96 + LimitPolicy().queue_target(96) == 108  # it stopped growing
    # another client holds half of the engine's requests: our share of 96 + queue
    c2, clock2 = controller(start=256)
    for _ in range(2):
        clock2.t += 1
        limit = c2.update(full, in_flight=128)
    assert limit == 54


def test_preemption_cuts_once_per_hold_and_growth_resumes_after_it():
    c, clock = controller(start=100, hold_s=3.0)
    clock.t += 1
    assert (
        c.update(Reading(running=100, waiting=0, kv_usage=0.99, preempted=20), in_flight=100) == 70
    )  # a storm: x backoff
    clock.t += 1  # still preempting while the cut settles: no second cut
    assert c.update(Reading(running=90, waiting=0, kv_usage=0.98, preempted=3), in_flight=90) == 70
    clock.t += 1
    assert c.update(Reading(running=70, waiting=0, kv_usage=0.5), in_flight=70) == 70  # settling: no growth yet
    clock.t += 2  # past the hold
    grown = c.update(Reading(running=70, waiting=0, kv_usage=0.5), in_flight=70)
    assert 70 < grown <= 70 + math.ceil(70 * LimitPolicy().grow_fraction)  # additive now, not doubling
    clock.t += 3
    # one preempted: the engine over-admitted by about that, and the cut is in proportion, not x backoff
    assert c.update(Reading(running=grown, waiting=0, kv_usage=0.8, preempted=1), in_flight=grown) == grown - 2


def test_a_full_kv_cache_adds_only_a_queue_and_growth_stops_short_of_the_kv_target():
    c, clock = controller(start=40)
    clock.t += 1
    p = LimitPolicy()
    # the cache is full: the engine admits from its queue as it frees, so a queue of 25% is added, no more
    assert (
        c.update(Reading(running=40, waiting=0, kv_usage=p.kv_high), in_flight=40)
        == 40 + p.queue_target(40, kv_full=True)
        == 50
    )
    clock.t += 1
    assert c.update(Reading(running=40, waiting=10, kv_usage=1.0), in_flight=50) == 50
    assert c.last_reason == "queue at target"
    # a wave of completions: the queue doubles for a moment, within the dead band: no cut
    clock.t += 1
    assert c.update(Reading(running=38, waiting=12, kv_usage=1.0), in_flight=50) == 50
    c2, clock2 = controller(start=40)
    clock2.t += 1
    # 40 requests use 50% of the cache: doubling would need 100%; stop where kv_target (90%) is projected
    assert (
        c2.update(Reading(running=40, waiting=0, kv_usage=0.5), in_flight=40)
        == 40 + math.floor(40 * (p.kv_target / 0.5 - 1))
        == 72
    )


def test_a_full_kv_cache_holds_while_a_level_near_it_preempted_lately_then_tries_again():
    c, clock = controller(start=100, hold_s=3.0)
    clock.t += 1
    assert c.update(Reading(running=100, waiting=0, kv_usage=1.0, preempted=20), in_flight=100) == 70
    for _ in range(20):  # back up to 90% of the level that preempted, then the full cache holds it there
        clock.t += 1
        c.update(Reading(running=c.limit, waiting=0, kv_usage=1.0 if c.limit >= 90 else 0.8), in_flight=c.limit)
    assert c.limit == 90 and c.last_reason == "kv cache full"
    clock.t += LimitPolicy().forget_s  # a minute without preemption: the level is forgotten, a queue is tried
    assert c.update(Reading(running=90, waiting=0, kv_usage=1.0), in_flight=90) > 90
    assert c.congested_at is None


def test_limits_stay_within_floor_and_ceiling():
    c, clock = controller(start=2, floor=4, ceiling=50)
    assert c.limit == 4
    for _ in range(10):
        clock.t += 1
        c.update(Reading(running=c.limit, waiting=0, kv_usage=0.0), in_flight=c.limit)
    assert c.limit == 50
    for _ in range(10):
        clock.t += 10
        c.update(Reading(running=10, waiting=0, kv_usage=0.99, preempted=50), in_flight=c.limit)
    assert c.limit == 4


class SimEngine:
    """A toy engine: runs at most `max_running`, holds `kv_tokens`; a request grows to `answer` tokens.

    It admits requests while the cache holds them at their current (half-grown, on average) size, as
    vLLM does, and preempts what no longer fits once they have grown: over-admission shows as preemption.
    """

    def __init__(self, max_running: int, kv_tokens: int, answer: int) -> None:
        self.max_running, self.kv_tokens, self.answer = max_running, kv_tokens, answer

    def read(self, in_flight: int) -> Reading:
        admitted = min(in_flight, self.max_running, 2 * self.kv_tokens // self.answer)
        fits = self.kv_tokens // self.answer
        running = min(admitted, fits)
        return Reading(
            running=running,
            waiting=in_flight - running,
            kv_usage=min(1.0, admitted * self.answer / self.kv_tokens),
            preempted=max(0, admitted - fits),
        )


def run_sim(c: LimitController, clock: FakeClock, engine: SimEngine, polls: int) -> list[Reading]:
    readings = []
    for _ in range(polls):
        clock.t += 1
        r = engine.read(c.limit)  # a saturated job: we hold as many as the limit allows
        readings.append(r)
        c.update(r, in_flight=c.limit)
    return readings


def test_it_follows_the_answers_getting_longer_and_settles_without_preemption():
    c, clock = controller(start=64)
    engine = SimEngine(max_running=256, kv_tokens=64_000, answer=200)  # short answers: the batch limit binds
    readings = run_sim(c, clock, engine, 40)
    assert 256 <= c.limit <= 256 + LimitPolicy().queue_target(256)
    assert all(r.running == 256 for r in readings[-10:]) and sum(r.preempted for r in readings[-10:]) == 0
    engine.answer = 1000  # long answers: 64 fit in the cache now
    readings = run_sim(c, clock, engine, 60)
    assert sum(r.preempted for r in readings[:5]) > 0  # it overshot once...
    tail = readings[-20:]
    assert sum(r.preempted for r in tail) == 0  # ...and settles where nothing is preempted
    assert all(r.running >= 0.7 * 64 for r in tail)  # while the engine stays busy
    assert c.limit <= 64 + LimitPolicy().queue_target(64)


class ReservingEngine(SimEngine):
    """A toy SGLang: it admits only what its cache holds at full length (it reserves the answer's room), so a
    full cache queues and never preempts."""

    def read(self, in_flight: int) -> Reading:
        running = min(in_flight, self.max_running, self.kv_tokens // self.answer)
        return Reading(running=running, waiting=in_flight - running, kv_usage=running * self.answer / self.kv_tokens)


def test_an_engine_whose_full_cache_queues_keeps_a_queue_at_the_full_target_and_holds_steady():
    c, clock = controller(start=16)
    engine = ReservingEngine(max_running=1024, kv_tokens=65_536, answer=1024)  # 64 fit
    readings = run_sim(c, clock, engine, 40)
    tail = readings[-10:]
    target = LimitPolicy().queue_target(64, kv_full=True)
    assert all(r.running == 64 and r.preempted == 0 for r in tail)
    assert all(target <= r.waiting <= LimitPolicy().cut_queue_factor * target for r in tail)
    assert len({r.waiting for r in tail}) == 1  # steady: no cut-and-grow cycle
    # it retracts two requests now and then (SGLang's admission grows bolder until one is): the cut is small,
    # and its batch stays full
    readings = []
    for i in range(60):
        clock.t += 1
        r = engine.read(c.limit)
        if i % 15 == 0:
            r = Reading(running=r.running, waiting=r.waiting, kv_usage=r.kv_usage, preempted=2)
        readings.append(r)
        c.update(r, in_flight=c.limit)
    assert min(r.running for r in readings) == 64


def test_a_wave_of_answers_ending_together_is_not_a_full_engine():
    c, clock = controller(start=150)
    full = Reading(running=90, waiting=60, kv_usage=1.0)
    levels = []
    for r in (
        full,  # a first reading: nothing to compare with
        Reading(running=40, waiting=110, kv_usage=0.5),  # 50 answers of one length ended together
        full,  # their successors admitted: the batch refilled
        full,
    ):  # a queue well past its target at a steady batch: a full engine
        clock.t += 1
        levels.append(c.update(r, in_flight=150))
    assert levels == [150, 150, 150, 90 + LimitPolicy().queue_target(90, kv_full=True)]


def test_requests_the_engine_has_not_taken_in_yet_neither_cut_nor_grow_the_limit():
    # 264 sent, the engine's scheduler counts 12 running and none waiting: 252 are in its front end
    # (templating, tokenizing) while its batch fills; its own queue is what says it is full
    c, clock = controller(start=264)
    clock.t += 1
    assert c.update(Reading(running=12, waiting=0, kv_usage=0.3), in_flight=264) == 264
    assert c.last_reason == "front-end backlog"
    clock.t += 1
    # taken in: it runs 256 and queues 8; the queue target (32) says 24 more
    assert c.update(Reading(running=256, waiting=8, kv_usage=0.3), in_flight=264) == 288


def test_preemption_while_the_last_cut_drains_does_not_cut_again_and_its_level_is_approached_slowly():
    c, clock = controller(start=40, hold_s=3.0)
    c.slow_start = False
    clock.t += 1
    c.update(Reading(running=14, waiting=20, kv_usage=1.0), in_flight=34)
    clock.t += 1
    assert c.update(Reading(running=14, waiting=20, kv_usage=1.0, preempted=3), in_flight=40) == 18  # the queue rule
    for _ in range(5):  # 40 still in flight, preempting: no cut below 18 before they drain to it
        clock.t += 5
        assert c.update(Reading(running=14, waiting=10, kv_usage=1.0, preempted=3), in_flight=30) == 18
    clock.t += 5
    assert c.update(Reading(running=14, waiting=4, kv_usage=1.0, preempted=5), in_flight=18) == 12  # drained: cut
    assert c.congested_at == 18
    levels = []
    for _ in range(12):
        clock.t += 1
        levels.append(c.update(Reading(running=c.limit, waiting=0, kv_usage=0.5), in_flight=c.limit))
    # back to 90% of 18 fast, then one more per hold (3 s), not 12.5% a second
    assert levels == [12, 12, 14, 16, 16, 16, 17, 17, 17, 18, 18, 18]


def test_a_queue_while_the_engine_batch_still_grows_is_not_a_full_engine():
    c, clock = controller(start=264)
    levels = []
    for running in (40, 90, 150, 210, 256, 256):  # 264 sent at once: prefill is admitted a budget per step
        clock.t += 1
        levels.append(c.update(Reading(running=running, waiting=264 - running, kv_usage=0.2), in_flight=264))
    # no cut while it fills (the first reading has nothing to compare with: it holds too); then it runs
    # 256 and queues 8, below its queue target (32): 24 more, twice
    assert levels == [264] * 4 + [288, 312]


def test_a_limit_cut_while_the_batch_filled_slowly_follows_what_the_engine_then_runs():
    c, clock = controller(start=264)
    for running in (40, 42):  # a slow ramp (a busy CPU): the second reading looks like a full engine
        clock.t += 1
        limit = c.update(Reading(running=running, waiting=264 - running, kv_usage=0.05), in_flight=264)
    assert limit == 42 + 6
    clock.t += 5
    # the 264 sent before the cut are all in: it runs 250 of them with 14 queued, more than the limit
    assert c.update(Reading(running=250, waiting=14, kv_usage=0.5), in_flight=264) == 250 + 32
