"""A replica that stops answering mid-job is named as such: since when, how many of its requests moved.

Two STAND-IN servers (tests/generate/standin_server.py): replica 1 answers its first 5 requests,
then holds every later one unanswered (`hang_after`), as a SIGSTOPped engine does; replica 0
answers each request after 40 ms (sleeps: a lower bound whatever the load). Hedging re-sends the
held requests to replica 0 in the tail. Before, the summary showed replica 1 with its requests,
a few ok and 0 failures, and nothing else.
"""

from __future__ import annotations

import orjson
from helpers import assert_exactly_once, write_prompts
from rich.console import Console
from standin_server import StandinServer

import fleetgen.cli.generate as cli_generate
from fleetgen.generate import GenerateConfig, generate
from fleetgen.report import build_report


def test_a_replica_that_hangs_mid_job_is_reported_as_stopped_answering(tmp_path, monkeypatch):
    alive = StandinServer(delay_per_token_s=0.01)
    hung = StandinServer(hang_after=5)
    urls = [alive.start(), hung.start()]
    n = 100
    try:
        write_prompts(tmp_path / "p.jsonl", n)
        # The hedging threshold (0.2 s) is also the silence that counts as stopped: replica 0 alone
        # needs more than that after replica 1's last answer (87+ requests, 8 at a time, 40 ms each).
        stats = generate(
            GenerateConfig(
                prompts=tmp_path / "p.jsonl",
                output_dir=tmp_path / "out",
                endpoints=urls,
                model="standin",
                max_tokens=4,
                concurrency=8,
                hedge_after_s=0.2,
                warmup=False,
            ),  # hang_after counts the job's requests
            handle_signals=False,
        )
    finally:
        hung.release()
        alive.stop()
        hung.stop()
    assert stats.ok == n
    assert_exactly_once(tmp_path / "out", [f"p{i}" for i in range(n)], 1)
    r0, r1 = stats.replicas
    assert r1.ok == 5 and r1.failures == 0 and r1.moved >= 1
    assert stats.stopped_answering(r0) is None
    gone = stats.stopped_answering(r1)
    assert gone is not None, "replica 1 held every request after its 5th: it stopped answering"
    assert 0 <= gone["since_s"] <= stats.elapsed_s and gone["silent_for_s"] >= 0.2
    assert gone["unanswered"] == gone["moved"] == r1.moved  # each held request was answered by replica 0
    assert gone["moved"] <= r1.requests - r1.ok

    saved = orjson.loads((tmp_path / "out" / "stats.json").read_bytes())["replicas"]
    assert saved[1]["stopped_answering"] == gone and saved[1]["moved"] == r1.moved
    assert saved[0]["stopped_answering"] is None

    console = Console(record=True, width=300)
    monkeypatch.setattr(cli_generate, "console", console)
    cli_generate.print_summary(stats, tmp_path / "out")
    text = console.export_text()
    assert f"replica 1 ({urls[1]}) stopped answering {gone['since_s']:.1f}s into the run" in text
    assert f"{gone['moved']} of them answered by another replica" in text and "replica 0 (" not in text

    report = build_report(tmp_path / "out", dest=tmp_path / "report", tokenizer="/nonexistent").read_text()
    assert f"Replica 1 ({urls[1]}) stopped answering" in report
