"""Servers that misbehave: 500, 429, garbage JSON, truncated bodies, a hang that never closes.

Every server here is a STAND-IN (FaultyStandin over tests/generate/standin_server.py): the fault is
the server's, so a real engine adds nothing but minutes.
"""

from __future__ import annotations

import time

import pytest
from faultkit import FaultyStandin, audit, gen_config
from helpers import write_prompts
from standin_server import StandinServer

from fleetgen.errors import NoReplicaError
from fleetgen.generate import generate

N = 60
IDS = [f"p{i}" for i in range(N)]
FAULTS = ["500", "429", "garbage", "truncated"]
WHAT = {
    "500": "HTTP 500 with an OpenAI error body",
    "429": "HTTP 429 with Retry-After: 0",
    "garbage": "HTTP 200 with a body that is not JSON",
    "truncated": "HTTP 200, Content-Length 400, 80 bytes sent, connection closed",
}


@pytest.mark.parametrize("fault", FAULTS)
def test_intermittent_fault_is_retried_to_completion(tmp_path, recorder, fault):
    server = FaultyStandin(fault, every=3)
    url = server.start()
    try:
        write_prompts(tmp_path / "p.jsonl", N)
        # Every 3rd request fails, counted across the 8 in flight: which attempts of one row land on a
        # 3rd depends on the interleaving, and with the default 6 attempts a row hit it 6 times in a row
        # once in CI (429, Retry-After 0: its retries go out at once). 20 attempts: about 3e-10 a row.
        stats = generate(gen_config(tmp_path, [url], replica_failures=50, max_attempts=20), handle_signals=False)
    finally:
        server.stop()
    a = audit(tmp_path / "out", IDS, 1)
    recorder.record(
        f"server_{fault}_intermittent",
        fault=f"replica answers {fault} (every 3rd request)",
        injected=f"stand-in: {WHAT[fault]} on requests 3, 6, 9, ...",
        runs=1,
        audit=a,
        outcome=f"{server.faults} faults retried; {stats.ok} ok, {stats.errors} errors",
    )
    a.assert_clean()
    assert server.faults >= N // 3 - 1 and stats.ok == N and stats.errors == 0


@pytest.mark.parametrize("fault", FAULTS)
def test_persistent_fault_becomes_row_errors_then_retry_errors_completes(tmp_path, recorder, fault):
    server = FaultyStandin(fault, every=1)
    url = server.start()
    write_prompts(tmp_path / "p.jsonl", 12)
    ids = IDS[:12]
    stopped, stats = None, None
    try:
        stats = generate(gen_config(tmp_path, [url], max_attempts=2, give_up_after_s=2.0), handle_signals=False)
    except NoReplicaError as e:
        stopped = e
    finally:
        server.stop()
    # A server that fails everything is a dead server: the job stops cleanly instead of turning the
    # whole prompt set into errors (rows that ran out of attempts first are errors). A 429 says
    # "busy", not "broken": the replica stays, and each row becomes an error after its attempts.
    if fault == "429":
        assert stopped is None and stats.errors == 12
    else:
        assert stopped is not None and "no replica has answered" in stopped.message and stopped.hint
    first = audit(tmp_path / "out", ids, 1)
    assert first.duplicated == 0 and first.corrupt == 0, first
    reasons = [r for r in first.error_reasons]
    key = {"500": "HTTP 500", "429": "HTTP 429", "garbage": "not a chat completion", "truncated": "connection error"}[
        fault
    ]
    assert all(key in r for r in reasons), reasons[:2]
    healthy = StandinServer()
    url2 = healthy.start()
    try:
        again = generate(gen_config(tmp_path, [url2], retry_errors=True), handle_signals=False)
    finally:
        healthy.stop()
    a = audit(tmp_path / "out", ids, 1)
    recorder.record(
        f"server_{fault}_persistent",
        fault=f"replica answers {fault} to every request",
        injected=f"stand-in: {WHAT[fault]} always; then a healthy stand-in and --retry-errors",
        runs=2,
        audit=a,
        outcome=(f"stopped cleanly after 2 s: '{stopped.message[:40]}...'" if stopped else "run completed")
        + f"; {len(reasons)} rows in errors.jsonl"
        + (f" ('{reasons[0][:50]}')" if reasons else "")
        + f"; resume with --retry-errors: {again.ok} ok",
    )
    a.assert_clean()
    assert a.errors == 0 and a.results == 12


def test_replica_that_hangs_without_closing_is_routed_around(tmp_path, recorder):
    hung = FaultyStandin("hang", every=1)
    good = StandinServer(delay_per_token_s=0.005)
    urls = [hung.start(), good.start()]
    write_prompts(tmp_path / "p.jsonl", N)
    t0 = time.monotonic()
    try:
        stats = generate(gen_config(tmp_path, urls, timeout_base_s=1.0, replica_cooldown_s=30), handle_signals=False)
    finally:
        hung.stop()
        good.stop()
    wall = time.monotonic() - t0
    a = audit(tmp_path / "out", IDS, 1)
    recorder.record(
        "server_hang",
        fault="a replica hangs without closing connections",
        injected="stand-in accepts every request and never answers nor closes; a second, healthy stand-in",
        runs=1,
        audit=a,
        outcome=f"requests timed out (1 s), the replica left rotation; {stats.ok} ok on the healthy one in {wall:.1f}s",
    )
    a.assert_clean()
    assert stats.ok == N and stats.replicas[0].ok == 0 and stats.replicas[1].ok == N
    assert wall < 30
