"""The warm-up gate (generate/dispatch/warmup.py): each replica compiles the job's sampling paths before it takes work.

Shown on a STAND-IN server (tests/generate/standin_server.py, `first_use_stall_s`): it plays SGLang's
first-use kernel JIT, stalling every request while a path "compiles", and records for each request
whether its path was already compiled when it arrived. A real engine compiles nothing on CPU, so only
the stand-in can show the ordering; test_warmup_engine.py shows the requests reach a real vLLM.
"""

from __future__ import annotations

import asyncio

import orjson
import pytest
from helpers import assert_exactly_once, write_prompts
from standin_server import StandinServer, standin_path

from fleetgen.errors import NoReplicaError
from fleetgen.generate import GenerateConfig, SamplingProfile, generate
from fleetgen.generate.dispatch import client
from fleetgen.generate.dispatch.dispatcher import Dispatcher
from fleetgen.generate.dispatch.warmup import WARMUP_PROMPT, Warmup, sampling_paths

PROFILES = [
    {"name": "greedy", "temperature": 0.0},
    {"name": "nucleus", "temperature": 0.8, "top_p": 0.9},
    {"name": "nucleus-hot", "temperature": 1.1, "top_p": 0.9},  # the same path as nucleus: one warm-up
    {"name": "floor", "temperature": 0.8, "min_p": 0.05},
    {"name": "topk", "temperature": 0.8, "top_k": 20},
]


def cfg(tmp_path, endpoints, **kw) -> GenerateConfig:
    base = dict(
        prompts=tmp_path / "p.jsonl",
        output_dir=tmp_path / "out",
        endpoints=endpoints,
        max_tokens=8,
        concurrency=4,
        timeout_base_s=30.0,
        timeout_per_token_s=0.0,
        backoff_base_s=0.01,
        backoff_max_s=0.05,
        replica_cooldown_s=0.2,
        hedge=False,
        commit_interval_s=0.0,
        model="standin",
    )
    base.update(kw)
    return GenerateConfig(**base)


def is_warmup(body: dict) -> bool:
    return body["messages"][-1]["content"] == WARMUP_PROMPT


def test_no_job_request_reaches_a_replica_before_each_of_its_paths_answered(tmp_path):
    servers = [StandinServer(first_use_stall_s=0.2) for _ in range(2)]
    urls = [s.start() for s in servers]
    try:
        write_prompts(tmp_path / "p.jsonl", 12)
        stats = generate(cfg(tmp_path, urls, samples=3, profiles=PROFILES), handle_signals=False)
    finally:
        for s in servers:
            s.stop()
    assert_exactly_once(tmp_path / "out", [f"p{i}" for i in range(12)], 3)
    for server in servers:
        job = [(path, compiled) for path, compiled, body in server.arrivals if not is_warmup(body)]
        warm = [path for path, _, body in server.arrivals if is_warmup(body)]
        assert job, "the job used both replicas"
        cold = [path for path, compiled in job if not compiled]
        assert not cold, f"job requests arrived before their path was compiled: {cold}"
        # One warm-up per distinct path, and they cover every path the job's requests took.
        assert sorted(warm) == sorted(set(warm)) and set(warm) >= {p for p, _ in job}
    assert stats.warmup is not None and len(stats.warmup["paths"]) == 4
    saved = orjson.loads((tmp_path / "out" / "stats.json").read_bytes())
    assert {r["index"] for r in saved["warmup"]["replicas"]} == {0, 1}
    # The dispatcher never saw a warm-up request: its counts are the job's alone.
    assert sum(r.requests for r in stats.replicas) == 36


@pytest.mark.parametrize(
    ("job", "profiles", "expected"),
    [
        ({}, [], ["temperature"]),
        ({"top_p": 0.9}, [], ["top_p<1"]),
        ({"temperature": 0.0}, [], ["greedy"]),
        ({"seed": 7}, [], ["temperature+seed"]),
        (
            {},
            [{"name": "a", "temperature": 0.3}, {"name": "b", "temperature": 1.2, "reasoning_effort": "low"}],
            ["temperature"],
        ),
        (
            {},
            [{"name": "a", "top_k": 1}, {"name": "b", "top_k": 40}, {"name": "c", "min_p": 0.1, "top_p": 0.95}],
            ["greedy", "top_k", "top_p<1+min_p"],
        ),
        (
            {},
            [{"name": "a", "repetition_penalty": 1.1}, {"name": "b", "repetition_penalty": 1.0}],
            ["temperature+penalties", "temperature"],
        ),
        ({}, [{"name": "a", "extra_body": {"top_a": 0.2}}], ["temperature+extra:top_a"]),
    ],
)
def test_the_warm_up_set_is_one_path_per_distinct_kernel_choice(tmp_path, job, profiles, expected):
    config = cfg(tmp_path, ["http://127.0.0.1:1"], profiles=[SamplingProfile(**p) for p in profiles], **job)
    paths = sampling_paths(config.sampling, "m")
    assert [p.name for p in paths] == expected
    for path in paths:  # each body carries what the job's requests of that path carry, and is short
        assert path.body["max_tokens"] <= 4 and path.body["model"] == "m"
        assert standin_path(path.body)  # a well-formed chat body


def test_a_profile_with_a_length_floor_still_gets_a_short_warm_up_the_engine_accepts(tmp_path):
    """SGLang refused `min_new_tokens 128` with `max_new_tokens 4`
    (H200, 0.5.12): the floor is cut to the warm-up's length."""
    profiles = [SamplingProfile(name="fixed", max_tokens=512, extra_body={"min_tokens": 128})]
    [path] = sampling_paths(cfg(tmp_path, ["http://127.0.0.1:1"], profiles=profiles).sampling, "m")
    assert path.name == "temperature+extra:min_tokens"
    assert path.body["max_tokens"] <= 4 and path.body["min_tokens"] <= path.body["max_tokens"]


def test_a_replica_whose_warm_up_fails_is_reported_and_stays_out_of_rotation(tmp_path, caplog):
    broken, good = StandinServer(fail_first=10_000), StandinServer(first_use_stall_s=0.0)
    urls = [broken.start(), good.start()]

    async def main():
        dispatcher = Dispatcher(urls, 4)
        job = cfg(tmp_path, urls, max_attempts=2, top_p=0.9)
        async with client.new_session(None, 16) as http:
            warmup = Warmup.start(job.warmup, job.sampling, job.transport, dispatcher, http, "standin")
            await warmup.settled()
            return dispatcher, [dispatcher.try_acquire() for _ in range(4)], warmup.to_dict()

    try:
        dispatcher, taken, summary = asyncio.run(main())
    finally:
        broken.stop()
        good.stop()
    assert [r.index for r in taken] == [1, 1, 1, 1]  # the failed replica is never handed out
    assert not dispatcher.replicas[0].in_rotation and "HTTP 500" in dispatcher.replicas[0].stats.warmup_error
    assert len(broken.bodies) == 2  # its two attempts
    assert "HTTP 500" in summary["replicas"][0]["error"] and "error" not in summary["replicas"][1]
    err = caplog.text
    assert f"replica 0 ({urls[0]}) failed its warm-up" in err and "stand-in: scripted internal error" in err


def test_the_job_proceeds_on_the_replicas_that_warmed(tmp_path):
    broken, good = StandinServer(fail_first=10_000), StandinServer(first_use_stall_s=0.0)
    urls = [broken.start(), good.start()]
    try:
        write_prompts(tmp_path / "p.jsonl", 6)
        stats = generate(cfg(tmp_path, urls, max_attempts=2, top_p=0.9), handle_signals=False)
    finally:
        broken.stop()
        good.stop()
    assert stats.ok == 6 and stats.replicas[0].requests == 0
    assert broken.bodies and all(is_warmup(b) for b in broken.bodies)  # it got warm-ups only, never a job request


def test_when_every_replica_fails_its_warm_up_the_run_stops_saying_so(tmp_path):
    broken = StandinServer(fail_first=10_000)
    url = broken.start()
    try:
        write_prompts(tmp_path / "p.jsonl", 3)
        with pytest.raises(NoReplicaError, match="no replica finished its warm-up: replica 0 failed"):
            generate(cfg(tmp_path, [url], max_attempts=1), handle_signals=False)
    finally:
        broken.stop()
    assert all(is_warmup(b) for b in broken.bodies)


def test_warmup_off_sends_none(tmp_path):
    server = StandinServer(first_use_stall_s=0.0)
    url = server.start()
    try:
        write_prompts(tmp_path / "p.jsonl", 3)
        stats = generate(cfg(tmp_path, [url], warmup=False), handle_signals=False)
    finally:
        server.stop()
    assert stats.ok == 3 and not any(is_warmup(b) for b in server.bodies) and stats.warmup is None


def test_a_row_waiting_for_the_warm_up_records_the_wait_apart_from_its_latency(tmp_path):
    server = StandinServer(first_use_stall_s=2.0)  # the first request of a sampling path "compiles" for 2 s
    try:
        write_prompts(tmp_path / "p.jsonl", 20)
        generate(cfg(tmp_path, [server.start()], top_p=0.9), handle_signals=False)
    finally:
        server.stop()
    rows = [orjson.loads(x) for x in (tmp_path / "out" / "results.jsonl").read_bytes().splitlines()]
    timing = [r["timing"] for r in rows]
    job_start = min(t["started_at"] - t["wait_s"] for t in timing)
    # No job request went out before the warm-up's compile ended (sleeps are lower bounds), so every row's
    # send, where its latency starts, is at least 2 s into the job; the wait before it is recorded apart.
    assert all(t["started_at"] - job_start >= 2.0 for t in timing)
    assert max(t["wait_s"] for t in timing) >= 2.0
    assert all(t["wait_s"] >= 0 and t["latency_s"] >= 0 for t in timing)
