"""A stop (Ctrl-C) lets the samples in flight finish for the whole grace; only a second stop or the grace's end
abandons them.

The loop is driven with in-memory parts (no server, no journal): what is under test is when it gives up, and
the exact order of event-loop callbacks that once made a single stop abandon everything at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import pytest

import fleetgen.generate.loop as loop_module
from fleetgen.generate.journal.outcomes import Failed, Outcome
from fleetgen.generate.loop import SampleLoop, Stop


class _Dispatcher:
    capacity = 2
    home_waiters = 0
    on_capacity = None

    def enter_tail(self) -> None:
        pass

    def forget(self, prompt_id: str) -> None:
        pass


class _Session:
    dispatcher = _Dispatcher()


class _Journal:
    def save_done(self, if_changed: bool = False) -> None:
        pass


class _Writer:
    """Keeps what it is given; its run() ends when closed."""

    def __init__(self) -> None:
        self.journal = _Journal()
        self.got: list[Outcome] = []
        self._closed = asyncio.Event()

    async def run(self) -> None:
        await self._closed.wait()

    async def put(self, outcome: Outcome) -> None:
        self.got.append(outcome)

    async def close(self) -> None:
        self._closed.set()


class _Prompt:
    def __init__(self, i: int) -> None:
        self.id = f"p{i}"
        self.line = i


class _Work:
    """One sample of each of `n` prompts."""

    progress = None
    stats = None

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self) -> Iterator[tuple[_Prompt, int]]:
        return iter([(_Prompt(i), 0) for i in range(self.n)])

    def finished(self, prompt_id: str) -> bool:
        return True


class _Stats:
    interrupted = False
    stopped_reason: str | None = None


def _loop(stop: Stop, grace_s: float) -> tuple[SampleLoop, _Writer]:
    work = _Work(2)
    work.stats = _Stats()  # type: ignore[assignment]
    writer = _Writer()
    return SampleLoop(_Session(), writer, work, stop, grace_s), writer  # type: ignore[arg-type]


async def test_a_stop_whose_own_callback_runs_after_the_loop_waits_does_not_abandon(monkeypatch, caplog):
    """Sample 0 ends and the stop is requested in the same turn of the event loop, in the order a signal
    can land: the loop resumes (sees the stop, starts to wait) before the stop future's done-callback
    wakes it. That wake-up is not the grace's end: sample 1, still in flight, must be waited for."""
    stop = Stop()
    loop = asyncio.get_running_loop()
    release_1 = asyncio.Event()

    async def regenerate(session: object, prompt: _Prompt, sample: int) -> Outcome:
        if prompt.id == "p0":
            await asyncio.sleep(0.01)
            # Two hops: the stop lands after this task's done-callback has woken the loop.
            loop.call_soon(lambda: loop.call_soon(stop.request, "SIGINT"))
            return Failed(prompt.id, sample, "done", "test", prompt.line)
        await release_1.wait()
        return Failed(prompt.id, sample, "done", "test", prompt.line)

    monkeypatch.setattr(loop_module, "regenerate", regenerate)
    sample_loop, writer = _loop(stop, grace_s=30)
    run = asyncio.create_task(sample_loop.run())
    await asyncio.sleep(0.2)
    assert not run.done(), "a single stop abandoned the sample in flight before the grace"
    release_1.set()
    await asyncio.wait_for(run, 5)
    assert sorted(o.id for o in writer.got) == ["p0", "p1"]
    assert not any("abandoning" in r.message for r in caplog.records)


@pytest.mark.parametrize("second", [False, True])
async def test_the_grace_end_or_a_second_stop_abandons_and_says_so(monkeypatch, caplog, second):
    stop = Stop()
    never = asyncio.Event()

    async def regenerate(session: object, prompt: _Prompt, sample: int) -> Outcome:
        await never.wait()
        raise AssertionError("unreachable")

    monkeypatch.setattr(loop_module, "regenerate", regenerate)
    sample_loop, writer = _loop(stop, grace_s=0.2 if not second else 30)
    caplog.set_level(logging.WARNING, logger="fleetgen")
    run = asyncio.create_task(sample_loop.run())
    await asyncio.sleep(0.05)
    stop.request("SIGINT")
    if second:
        await asyncio.sleep(0.05)
        stop.request("SIGINT")
    await asyncio.wait_for(run, 5)  # the grace (0.2 s) or the second stop ends it, never the 30 s
    assert writer.got == []
    said = [r.message for r in caplog.records if "abandoning" in r.message]
    assert said == [
        "abandoning 2 sample(s) in flight: "
        + ("stopped at once (SIGINT)" if second else "the 0.2s grace ran out")
        + "; a resume redoes them"
    ]
