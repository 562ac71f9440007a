"""Dispatch policy: windows, least outstanding, affinity, round-robin, ejection and probing, hedging, giving up."""

from __future__ import annotations

import asyncio
import random

import pytest

from fleetgen.errors import NoReplicaError
from fleetgen.generate.config.sections import RoutingConfig, TransportConfig
from fleetgen.generate.dispatch.client import Rejected, TransientError
from fleetgen.generate.dispatch.dispatcher import Dispatcher
from fleetgen.generate.dispatch.hedging import HEDGE_MIN_OBSERVED


def sections(**kw) -> tuple[RoutingConfig, TransportConfig]:
    """The routing and transport sections from their fields' names, with retries and cool-downs made quick."""
    kw = {"backoff_base_s": 0.001, "backoff_max_s": 0.01, "replica_cooldown_s": 0.05, **kw}
    return tuple(s(**{k: v for k, v in kw.items() if k in s.model_fields}) for s in (RoutingConfig, TransportConfig))


def make(n=2, window=2, **kw) -> Dispatcher:
    return Dispatcher([f"http://r{i}" for i in range(n)], window, *sections(**kw), rng=random.Random(0))


def slow_on_replica_0():
    """A request function that hangs on replica 0 until cancelled (recorded) and answers at once elsewhere."""
    cancelled = []

    async def fn(r):
        if r.index == 0:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.append(r.index)
                raise
        return f"from {r.index}"

    return cancelled, fn


def hedging_ready(d: Dispatcher, latency_s: float = 0.01) -> Dispatcher:
    """As if enough quick answers had come back for hedging to know what slow is."""
    d.hedging.latencies.extend([latency_s] * HEDGE_MIN_OBSERVED)
    return d


async def test_least_outstanding_fills_windows_evenly_and_waits_when_full():
    d = make()
    got = [await d.acquire() for _ in range(4)]
    assert sorted(r.index for r in got) == [0, 0, 1, 1]
    waiter = asyncio.ensure_future(d.acquire())
    await asyncio.sleep(0.01)
    assert not waiter.done()  # every window is full
    d.release(got[3], ok=True)
    r = await asyncio.wait_for(waiter, 1)
    assert r is got[3] or r.index == got[3].index


async def test_affinity_sticks_to_a_replica_until_it_is_clearly_busier():
    d = make(window=16)
    first = await d.acquire("p")
    again = await d.acquire("p")
    assert again is first  # samples of one prompt share the prefix cache
    other = d.replicas[1 - first.index]
    assert (await d.acquire("q")) is other  # a new prompt goes to the less loaded one
    for _ in range(4):
        await d.acquire("p")
    # pinned now holds 6, the other 1: slack (2) exceeded, so balance wins and the pin moves
    moved = await d.acquire("p")
    assert moved is other
    assert (await d.acquire("p")) is other


async def test_round_robin_waits_for_a_full_replica_even_when_another_is_idle():
    d = make(window=1, dispatch="round-robin")
    a = await d.acquire()
    b = await d.acquire()
    assert (a.index, b.index) == (0, 1)
    d.release(b, ok=True)  # replica 1 is free, but it is replica 0's turn
    waiter = asyncio.ensure_future(d.acquire())
    await asyncio.sleep(0.02)
    assert not waiter.done()
    d.release(a, ok=True)
    assert (await asyncio.wait_for(waiter, 1)).index == 0


async def test_failing_replica_is_ejected_retried_elsewhere_and_probed_after_cooldown():
    d = make(window=4, prefix_affinity=False, hedge=False)
    healthy = {"r0": False}
    calls = []

    async def fn(r):
        calls.append(r.index)
        if r.index == 0 and not healthy["r0"]:
            raise TransientError("connection refused")
        return f"answer from {r.index}"

    results = [await d.run(None, fn) for _ in range(6)]
    assert all(res == "answer from 1" for res, _ in results)
    r0 = d.replicas[0]
    assert not r0.in_rotation and r0.stats.ejections == 1 and r0.stats.failures == 3
    assert calls.count(0) == 3
    healthy["r0"] = True
    await asyncio.sleep(0.08)  # past the cool-down: the next request may probe replica 0
    d.replicas[1].stats.outstanding = d.replicas[1].window  # make 1 busy so the probe goes to 0
    res, rep = await d.run(None, fn)
    assert rep.index == 0 and r0.in_rotation


async def test_a_cooldown_timer_that_fires_before_the_clock_still_lets_the_probe_go():
    # uvloop's timers count whole milliseconds, so one can fire while time.monotonic() is still short of
    # retry_at; a clock running at half the loop's speed makes every cool-down timer fire early.
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    policy = sections(replica_failures=1, hedge=False)
    d = Dispatcher(["http://r0"], 1, *policy, clock=lambda: t0 + (loop.time() - t0) / 2, rng=random.Random(0))
    r = await d.acquire()
    d.release(r, failure=TransientError("connection refused"))
    assert not r.in_rotation
    probe = await asyncio.wait_for(d.acquire(), 1)  # without the re-armed timer this waits for give_up_after_s
    assert probe is r


async def test_rejection_is_not_retried_and_does_not_eject():
    d = make(hedge=False)
    calls = []

    async def fn(r):
        calls.append(r.index)
        raise Rejected("HTTP 400: prompt too long", status=400)

    for _ in range(5):
        with pytest.raises(Rejected):
            await d.run(None, fn)
    assert len(calls) == 5 and all(r.in_rotation for r in d.replicas)
    assert all(r.outstanding == 0 for r in d.replicas)


async def test_gives_up_with_no_replica_error_when_every_replica_is_gone():
    d = make(window=2, give_up_after_s=0.3, max_attempts=1000, hedge=False)

    async def fn(r):
        raise TransientError("connection refused")

    with pytest.raises(NoReplicaError, match="no replica has answered"):
        await asyncio.wait_for(d.run(None, fn), 10)


async def test_hedge_in_the_tail_takes_the_first_answer_and_cancels_the_straggler():
    d = hedging_ready(make(window=2, hedge_after_s=0.05, prefix_affinity=False))
    cancelled, fn = slow_on_replica_0()

    d.replicas[1].stats.outstanding = 1  # so the first request lands on replica 0
    d.enter_tail()
    res, rep = await asyncio.wait_for(d.run(None, fn), 5)
    assert res == "from 1" and rep.index == 1
    assert cancelled == [0]
    assert d.replicas[0].outstanding == 0 and d.replicas[1].outstanding == 1
    assert d.replicas[1].stats.hedges == 1


async def _straggler_in_the_tail(d):
    """A request on replica 0 that never answers unless cancelled; the tail has begun."""

    async def fn(r):
        if r.index == 0:
            await asyncio.sleep(30)
        return f"from {r.index}"

    d.replicas[1].stats.outstanding = d.replicas[1].window  # the first request lands on replica 0
    task = asyncio.ensure_future(d.run(None, fn))
    await asyncio.sleep(0.01)
    d.enter_tail()
    return task


async def test_no_twin_before_enough_answers_say_what_slow_is():
    d = make(window=4, hedge_after_s=0.05, prefix_affinity=False)
    task = await _straggler_in_the_tail(d)
    for _ in range(d.replicas[1].window):
        d.release(d.replicas[1])  # replica 1 empties, and the dispatcher looks again
    await asyncio.sleep(0.3)  # 6x the threshold, replica 1 idle: still no answers seen, so no twin
    assert d.replicas[1].stats.hedges == 0 and not task.done()
    hedging_ready(d)
    res, rep = await _answer(task)
    assert (res, rep.index) == ("from 1", 1) and d.replicas[1].stats.hedges == 1


async def test_a_twin_waits_for_a_replica_at_most_half_full():
    d = hedging_ready(make(window=4, hedge_after_s=0.05, prefix_affinity=False))
    task = await _straggler_in_the_tail(d)
    d.release(d.replicas[1])  # 3/4: a free slot, but a twin there would cost its batch
    await asyncio.sleep(0.3)
    assert d.replicas[1].stats.hedges == 0 and not task.done()
    d.release(d.replicas[1])  # 2/4: half full, drained enough
    res, rep = await _answer(task)
    assert (res, rep.index) == ("from 1", 1) and d.replicas[1].stats.hedges == 1


async def test_a_replacement_takes_new_work_and_the_old_address_failures_never_count_against_it():
    d = make(n=2, window=2, replica_failures=1)
    old = [await d.acquire() for _ in range(4)]  # both windows full, two requests on replica 1's old address
    assert d.replace_endpoint(1, "http://r1-new") and not d.replace_endpoint(1, "http://r1-new")
    fresh = await asyncio.wait_for(d.acquire(), 1)  # the replacement has an empty window
    assert fresh.endpoint == "http://r1-new" and fresh.index == 1
    for r in old:
        if r.index == 1:
            d.release(r, failure=TransientError("connection refused"))  # the dead address fails late
    assert d.replicas[1] is fresh and fresh.in_rotation and fresh.stats.failures == 0
    assert [s.endpoint for s in d.all_stats] == ["http://r0", "http://r1", "http://r1-new"]
    assert d.all_stats[1].failures == 2 and d.all_stats[1].outstanding == 0


async def test_a_replacement_revives_a_fleet_that_was_all_down():
    d = make(n=1, window=1, replica_failures=1, replica_cooldown_s=30.0, give_up_after_s=0.05)
    r = await d.acquire()
    d.release(r, failure=TransientError("connection refused"))  # out of rotation for 30 s
    d.replace_endpoint(0, "http://r0-new")
    await asyncio.sleep(0.1)  # past give_up_after_s: had it stayed down, acquire would raise
    assert (await asyncio.wait_for(d.acquire(), 1)).endpoint == "http://r0-new"


@pytest.mark.parametrize("hedge", [False, True])
async def test_retries_are_counted_and_answered_requests_observed_for_the_latency_histogram(hedge):
    from fleetgen.generate.observe.stats import Stats

    stats = Stats()
    policy = sections(hedge=hedge, prefix_affinity=False)
    d = Dispatcher(["http://r0", "http://r1"], 4, *policy, rng=random.Random(0), stats=stats)
    failures = iter([True, True, False, False, False])

    async def fn(r):
        if next(failures):
            raise TransientError("connection refused")
        return r.index

    for _ in range(3):
        await d.run(None, fn)
    assert stats.retries == 2  # two failed attempts, each sent again
    answered = sum(sum(r.stats.latency.counts) for r in d.replicas)
    assert answered == 3 == sum(r.stats.ok for r in d.replicas)


async def _answer(task):
    """The task's answer, without cancelling it on a timeout (wait_for would, and could get an answer then)."""
    done, _ = await asyncio.wait({task}, timeout=5)
    assert done, "the hedged request did not answer"
    return task.result()


async def _hedged(d, fn):
    """Start `fn` before the tail on replica 0 (replica 1 busy), enter the tail, free replica 1: a twin may start."""
    d.replicas[1].stats.outstanding = d.replicas[1].window  # so the first request lands on replica 0
    task = asyncio.ensure_future(d.run(None, fn))
    await asyncio.sleep(0.01)
    assert d.replicas[0].outstanding == 1
    d.enter_tail()
    d.replicas[1].stats.outstanding = 1
    d.release(d.replicas[1])  # a slot freed there wakes the watcher waiting for one
    return task


async def test_a_request_in_flight_when_the_tail_begins_is_hedged_and_the_straggler_cancelled():
    d = hedging_ready(make(window=2, hedge_after_s=0.05, prefix_affinity=False))
    cancelled, fn = slow_on_replica_0()

    res, rep = await _answer(await _hedged(d, fn))
    assert res == "from 1" and rep.index == 1
    assert cancelled == [0]
    assert [r.outstanding for r in d.replicas] == [0, 0]
    assert d.replicas[1].stats.hedges == 1 and d.replicas[1].stats.ok == 1 and d.replicas[0].stats.ok == 0
    assert asyncio.current_task().cancelling() == 0


async def test_a_straggler_that_answers_before_its_twin_wins_and_the_twin_is_cancelled():
    d = hedging_ready(make(window=2, hedge_after_s=0.05, prefix_affinity=False))
    cancelled = []

    async def fn(r):
        try:
            await asyncio.sleep(0.1 if r.index == 0 else 30)
        except asyncio.CancelledError:
            cancelled.append(r.index)
            raise
        return f"from {r.index}"

    res, rep = await _answer(await _hedged(d, fn))
    assert res == "from 0" and rep.index == 0
    await asyncio.sleep(0.01)
    assert cancelled == [1] and d.replicas[1].stats.hedges == 1
    assert [r.outstanding for r in d.replicas] == [0, 0] and d.replicas[0].stats.ok == 1


@pytest.mark.parametrize("failing", [0, 1])
async def test_when_one_of_a_hedged_pair_fails_the_other_answers(failing):
    d = hedging_ready(make(window=2, hedge_after_s=0.05, prefix_affinity=False))

    async def fn(r):
        # The twin starts at ~0.05 s; it fails fast (failing=1), or outlives the first's failure at 0.2 s.
        await asyncio.sleep(0.2 if r.index == 0 else (0.01 if failing == 1 else 0.3))
        if r.index == failing:
            raise TransientError("connection reset")
        return f"from {r.index}"

    res, rep = await _answer(await _hedged(d, fn))
    assert res == f"from {1 - failing}" and rep.index == 1 - failing
    await asyncio.sleep(0.01)
    assert d.replicas[failing].stats.failures == 1 and d.replicas[1 - failing].stats.ok == 1
    assert [r.outstanding for r in d.replicas] == [0, 0] and d.replicas[1].stats.hedges == 1


async def test_cancelling_a_hedged_request_cancels_both_and_frees_both_slots():
    d = hedging_ready(make(window=2, hedge_after_s=0.05, prefix_affinity=False))
    cancelled = []

    async def fn(r):
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(r.index)
            raise

    task = await _hedged(d, fn)
    await asyncio.sleep(0.1)
    assert d.replicas[1].stats.hedges == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0.01)
    assert sorted(cancelled) == [0, 1]
    assert [r.outstanding for r in d.replicas] == [0, 0]


@pytest.mark.parametrize("hedge", [False, True])
@pytest.mark.parametrize("tail", [False, True])
async def test_a_cancelled_request_frees_its_slot(hedge, tail):
    d = make(window=2, hedge=hedge, hedge_after_s=30.0, prefix_affinity=False)
    if tail:
        d.enter_tail()

    async def fn(r):
        await asyncio.sleep(30)

    task = asyncio.ensure_future(d.run(None, fn))
    await asyncio.sleep(0.01)
    assert sum(r.outstanding for r in d.replicas) == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [r.outstanding for r in d.replicas] == [0, 0]
    assert sum(r.stats.ok + r.stats.failures for r in d.replicas) == 0
