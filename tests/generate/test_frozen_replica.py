"""A replica that holds requests and answers none while the others answer is declared frozen (freeze.py).

The bound is judged on an injected clock against latencies the test feeds in, so it holds on any machine;
the end-to-end tests use STAND-IN servers (tests/generate/standin_server.py, not an engine) that hang
every request until released, as a SIGSTOPped engine does, and order their steps on the job's own log
lines, never on how fast this machine runs.
"""

from __future__ import annotations

import asyncio
import logging
import threading

import orjson
import pytest
from helpers import assert_exactly_once, write_prompts
from rich.console import Console
from standin_server import StandinServer

import fleetgen.cli.generate as cli_generate
from fleetgen.generate import GenerateConfig, generate
from fleetgen.generate.config.sections import TransportConfig
from fleetgen.generate.dispatch import freeze
from fleetgen.generate.dispatch.client import TransientError
from fleetgen.generate.dispatch.dispatcher import Dispatcher
from fleetgen.generate.dispatch.freeze import MIN_SILENCE_S

LOGGER = "fleetgen.generate.dispatch.freeze"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def held(r, n: int, sent: float) -> list[asyncio.Task]:
    """`n` requests held by `r` since `sent` (tasks that wait until cancelled), as the dispatcher registers them."""
    tasks = [asyncio.ensure_future(asyncio.sleep(3600)) for _ in range(n)]
    for t in tasks:
        r.inflight[t] = sent
        r.stats.outstanding += 1
    await asyncio.sleep(0)
    return tasks


def answers(d: Dispatcher, r, latencies: list[float], gap: float, holding: int = 8) -> None:
    """`r` answers requests of these latencies, one every `gap` seconds up to the clock's now, holding `holding`."""
    t = d.clock.now - gap * len(latencies)
    before, r.stats.outstanding = r.stats.outstanding, holding
    for latency in latencies:
        t += gap
        d.freezes.answered(r, t - latency, t)
        r.stats.answered(t)
    r.stats.outstanding = before


def fleet(factor: float = 2.0) -> tuple[Dispatcher, Clock]:
    clock = Clock()
    d = Dispatcher(["http://r0", "http://r1"], 8, transport=TransportConfig(freeze_factor=factor), clock=clock)
    return d, clock


async def never(r, timeout: float) -> None:
    await asyncio.sleep(3600)


@pytest.mark.parametrize(("latency", "expected"), [(4.0, 8.0), (0.5, MIN_SILENCE_S)])
async def test_a_replica_that_never_answered_is_frozen_after_a_bound_set_by_the_others_pace(latency, expected):
    # Replica 1 never answered in this run: it has no pace of its own. The others' latencies set the bound:
    # its 8 requests, sent at 0, are owed once their age / factor (2) passes the others' answers, so with
    # 4 s answers after 8 s; with 0.5 s answers after 1 s, below the least silence that can mean a freeze.
    d, clock = fleet()
    r0, r1 = d.replicas
    tasks = await held(r1, 8, sent=0.0)
    clock.now = expected - 0.01
    answers(d, r0, [latency] * 16, gap=0.001)
    d.freezes.check(never)
    assert r1.in_rotation and not r1.stats.frozen
    clock.now = expected + 0.01
    answers(d, r0, [latency], gap=0.001)
    d.freezes.check(never)
    assert not r1.in_rotation and r1.stats.frozen and r1.stats.freeze_count == 1 and r1.stats.resent == 8
    assert r0.in_rotation and not r0.stats.frozen
    (episode,) = r1.stats.freezes
    assert episode["at"] == clock.now and episode["resent"] == 8 and episode["silent_s"] == pytest.approx(clock.now)
    await asyncio.sleep(0)
    assert all(t.cancelled() for t in tasks)
    assert all(d.freezes.resend(t) for t in tasks), "each cancel is the watch's own: the request is re-sent"
    assert d.try_acquire() is r0, "no more work for the frozen replica"
    d.freezes.close()


@pytest.mark.parametrize(("old", "bound"), [(8, 3.0), (4, 6.0)])
async def test_a_replica_that_answered_while_holding_requests_may_be_silent_for_the_fleets_slowest_gap(old, bound):
    # Both replicas answer one request every 0.1 s while holding 8 (0.8 s a request in flight), but replica 0
    # once paused 1.5 s (12 s a request in flight): the slow end x factor (2) / the requests replica 1 held
    # at its last answer is how long it may stay silent: 3 s with 8 of them, 6 s with 4 (the rest came after).
    d, clock = fleet()
    r0, r1 = d.replicas
    clock.now = 100.0
    answers(d, r0, [1.0] * 16, gap=0.1)
    clock.now += 1.5
    answers(d, r0, [2.0], gap=1.5)  # the pause, with that request in flight throughout
    answers(d, r1, [1.0] * 16, gap=0.1)
    last = r1.stats.last_answer_at
    await held(r1, old, sent=last - 0.5)
    await held(r1, 8 - old, sent=last + 0.2)
    for at, frozen in ((bound - 0.1, False), (bound + 0.1, True)):
        clock.now = last + at
        answers(d, r0, [1.0], gap=0.01)
        d.freezes.check(never)
        assert r1.stats.frozen is frozen and r1.in_rotation is not frozen, at
    assert r1.stats.freezes[-1]["bound_s"] == pytest.approx(bound)
    d.freezes.close()


async def test_a_replica_slower_than_the_others_is_judged_by_its_own_pace_when_it_has_one():
    d, clock = fleet()
    r0, r1 = d.replicas
    clock.now = 100.0
    answers(d, r0, [1.0] * 32, gap=0.05)  # the fleet: 1 s answers
    answers(d, r1, [6.0] * 32, gap=0.6)  # replica 1 answers too, 6x slower
    await held(r1, 8, sent=clock.now + 0.5)  # then it gets 8 requests at once, after its last answer
    clock.now += 4.5  # 4 s later: twice the fleet's answers, but less than twice its own
    answers(d, r0, [1.0], gap=0.01)
    d.freezes.check(never)
    assert r1.in_rotation and not r1.stats.frozen
    r1.pace = None  # the same replica with no pace of its own is judged by the fleet's: frozen
    d.freezes.check(never)
    assert not r1.in_rotation and r1.stats.frozen
    d.freezes.close()


async def test_when_every_replica_is_silent_it_is_said_once_naming_them_and_none_is_taken_out(caplog):
    d, clock = fleet()
    r0, r1 = d.replicas
    clock.now = 50.0
    answers(d, r0, [1.0] * 16, gap=0.1)
    answers(d, r1, [1.0] * 16, gap=0.1)
    await held(r0, 4, sent=clock.now)
    await held(r1, 6, sent=clock.now)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        for _ in range(20):  # 20 s of silence, looked at every second
            clock.now += 1.0
            d.freezes.check(never)
        said = [m for m in caplog.messages if "no replica has answered" in m]
        assert len(said) == 1, said
        assert "replica 0 (http://r0, 4 in flight), replica 1 (http://r1, 6 in flight)" in said[0]
        assert "the job's problem" in said[0] and "none is taken out" in said[0]
        assert r0.in_rotation and r1.in_rotation and not r0.stats.freeze_count and not r1.stats.freeze_count
        (episode,) = d.freezes.fleet_silences
        assert episode["replicas"] == [0, 1] and episode["ended_at"] is None
        answers(d, r0, [1.0], gap=0.01)
        d.freezes.check(never)
        assert episode["ended_at"] == clock.now
        assert any("answers again" in m for m in caplog.messages)


async def test_a_frozen_replica_takes_no_work_until_a_probe_answers_then_rejoins(monkeypatch):
    monkeypatch.setattr(freeze, "PROBE_FIRST_S", 0.01)
    d, clock = fleet()
    r0, r1 = d.replicas
    answers(d, r0, [0.5] * 16, gap=0.01)
    await held(r1, 8, sent=clock.now)
    clock.now += 3.0
    answers(d, r0, [0.5], gap=0.01)
    tries: list[float] = []
    thawed = asyncio.Event()

    async def probe(r, timeout: float) -> None:
        assert r is r1
        tries.append(timeout)
        if len(tries) < 3:
            raise TransientError("timed out")  # still frozen: the next probe waits twice as long
        thawed.set()

    d.freezes.check(probe)
    assert r1.stats.frozen and not r1.in_rotation and d.try_acquire() is r0
    r1.stats.outstanding = 0  # its cancelled requests returned their slots (the dispatcher does so)
    await asyncio.wait_for(thawed.wait(), 5)
    await asyncio.sleep(0)
    assert len(tries) == 3 and all(t >= freeze.PROBE_TIMEOUT_MIN_S for t in tries)
    assert r1.in_rotation and not r1.stats.frozen and r1.stats.freezes[-1]["rejoined_at"] == clock.now
    r0.stats.outstanding = 8  # replica 0 full: the rejoined one takes the next request
    assert d.try_acquire() is r1


def run_in_thread(config: GenerateConfig) -> tuple[threading.Thread, dict]:
    out: dict = {}

    def go() -> None:
        try:
            out["stats"] = generate(config, handle_signals=False)
        except BaseException as e:  # surfaced by the test
            out["error"] = e

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t, out


class Said(logging.Handler):
    """The freeze watch's log lines, and an event per phrase the test waits for."""

    def __init__(self, *phrases: str) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []
        self.seen = {p: threading.Event() for p in phrases}

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        self.lines.append(text)
        for phrase, event in self.seen.items():
            if phrase in text:
                event.set()


def test_a_replica_frozen_from_its_first_request_is_named_its_requests_resent_and_it_rejoins(tmp_path, monkeypatch):
    # Replica 1 (a STAND-IN) holds every request unanswered from the start, until released: it never answers in
    # this run before it is declared frozen. Replica 0 holds its first request until released, so the job stays
    # open until replica 1 has thawed and rejoined (the test releases it once the job has named it frozen).
    alive = StandinServer(delay_per_token_s=0.01, hold_first=1)
    hung = StandinServer(hang_after=0)
    urls = [alive.start(), hung.start()]
    n = 120
    said = Said("replica 1 (" + urls[1] + ") is frozen", "replica 1 (" + urls[1] + ") rejoined")
    logger = logging.getLogger(LOGGER)
    logger.addHandler(said)
    logger.setLevel(logging.INFO)
    try:
        write_prompts(tmp_path / "p.jsonl", n)
        thread, out = run_in_thread(
            GenerateConfig(
                prompts=tmp_path / "p.jsonl",
                output_dir=tmp_path / "out",
                endpoints=urls,
                model="standin",
                max_tokens=8,
                concurrency=4,
                hedge=False,
                warmup=False,
            )
        )
        frozen, rejoined = said.seen.values()
        assert frozen.wait(60), said.lines
        hung.release()  # thawed: the next probe answers
        assert rejoined.wait(60), said.lines
        alive.release()
        thread.join(60)
    finally:
        logger.removeHandler(said)
        alive.stop()
        hung.stop()
    assert "error" not in out, out.get("error")
    stats = out["stats"]
    assert stats.ok == n and stats.errors == 0
    assert_exactly_once(tmp_path / "out", [f"p{i}" for i in range(n)], 1)
    r0, r1 = stats.replicas
    assert r1.freeze_count == 1 and r1.resent == 4 and not r1.frozen and r0.freeze_count == 0
    (episode,) = r1.freezes
    assert episode["rejoined_at"] is not None and episode["rejoined_at"] > episode["at"]

    saved = orjson.loads((tmp_path / "out" / "stats.json").read_bytes())
    block = saved["replicas"][1]["frozen"]
    assert block["count"] == 1 and block["resent"] == 4 and block["now"] is False
    assert block["episodes"][0]["at_s"] <= block["episodes"][0]["rejoined_at_s"]
    assert saved["replicas"][0]["frozen"]["count"] == 0

    console = Console(record=True, width=400)
    monkeypatch.setattr(cli_generate, "console", console)
    cli_generate.print_summary(stats, tmp_path / "out")
    text = console.export_text()
    assert f"replica 1 ({urls[1]}) was frozen 1 time(s): at {block['episodes'][0]['at_s']:.1f}s" in text
    assert "4 request(s) re-sent, rejoined at" in text


def test_when_both_replicas_go_silent_the_job_says_so_keeps_both_and_finishes_once_they_answer(tmp_path):
    # Two STAND-INs answer their first 20 requests, then hold every later one until released.
    servers = [StandinServer(delay_per_token_s=0.005, hang_after=20) for _ in range(2)]
    urls = [s.start() for s in servers]
    n = 80
    said = Said("no replica has answered")
    logger = logging.getLogger(LOGGER)
    logger.addHandler(said)
    try:
        write_prompts(tmp_path / "p.jsonl", n)
        thread, out = run_in_thread(
            GenerateConfig(
                prompts=tmp_path / "p.jsonl",
                output_dir=tmp_path / "out",
                endpoints=urls,
                model="standin",
                max_tokens=8,
                concurrency=4,
                hedge=False,
                warmup=False,
            )
        )
        (silent,) = said.seen.values()
        assert silent.wait(60), said.lines
        for s in servers:
            s.release()
        thread.join(60)
    finally:
        logger.removeHandler(said)
        for s in servers:
            s.stop()
    assert "error" not in out, out.get("error")
    stats = out["stats"]
    assert stats.ok == n
    assert_exactly_once(tmp_path / "out", [f"p{i}" for i in range(n)], 1)
    assert all(r.freeze_count == 0 and r.in_rotation for r in stats.replicas)
    line = next(m for m in said.lines if "no replica has answered" in m)
    assert f"replica 0 ({urls[0]}" in line and f"replica 1 ({urls[1]}" in line
    (episode,) = stats.fleet_silences
    assert episode["replicas"] == [0, 1] and episode["ended_at"] is not None


def test_status_the_job_file_and_the_metrics_name_a_frozen_replica():
    from fleetgen.cli.fleet import job_line
    from fleetgen.fleet.jobs import JobProgress
    from fleetgen.generate.observe.stats import ReplicaStats, Stats
    from fleetgen.generate.observe.watch import frozen_replicas
    from fleetgen.metrics.collectors import GenerateCollector

    clock = Clock()
    stats = Stats(clock=clock)
    stats.replicas = [ReplicaStats(0, "http://h:30000", 8), ReplicaStats(1, "http://h:30001", 8)]
    r1 = stats.replicas[1]
    r1.frozen, r1.freeze_count, r1.resent = True, 1, 8
    r1.freezes.append({"at": 12.0, "silent_s": 2.5, "bound_s": 2.0, "resent": 8})
    clock.now = 20.0
    frozen = frozen_replicas(stats)
    assert set(frozen) == {"http://h:30001"} and frozen["http://h:30001"].now
    job = JobProgress(
        pid=1,
        create_time=0.0,
        output_dir="out",
        updated_at=frozen["http://h:30001"].since + 8,
        total=10,
        done=5,
        ok=5,
        errors=0,
        resumed=0,
        samples_per_s=1.0,
        output_tokens_per_s=10.0,
        frozen=frozen,
    )
    line = job_line(JobProgress.model_validate_json(job.model_dump_json()), True)
    assert "[red]http://h:30001 frozen[/] for 0m08s (no work until a probe answers)" in line

    r1.frozen = False
    r1.freezes[-1]["rejoined_at"] = 18.0
    back = job.model_copy(
        update={"frozen": frozen_replicas(stats), "updated_at": frozen_replicas(stats)["http://h:30001"].since + 8}
    )
    assert "http://h:30001 was frozen 1x, rejoined 0m02s before this report" in job_line(back, True)

    r1.frozen = True
    samples = {
        (m.name, s.labels.get("replica")): s.value
        for m in GenerateCollector(stats).collect()
        for s in m.samples
        if m.name.startswith("fleetgen_replica_fr")
    }
    assert samples[("fleetgen_replica_frozen", "1")] == 1.0 and samples[("fleetgen_replica_frozen", "0")] == 0.0
    assert samples[("fleetgen_replica_freezes", "1")] == 1 and samples[("fleetgen_replica_frozen_resent", "1")] == 8
