"""A request the server never answers is cancelled and re-sent after a bound its replica's own pace sets.

A STAND-IN server (tests/generate/standin_server.py, not an engine) answers every request at once but never
answers one in 50, as a wedged request in an engine would. With the old fixed timeout (120 s + 0.5 s a token)
each such request held its sample for over two minutes; now the bound is what the replica's answers took per
token x max_tokens x stall_factor, at least stall_floor_s. The job finishes, says which replica it was, and
records every row exactly once.
"""

from __future__ import annotations

import orjson
from helpers import assert_exactly_once, write_prompts
from rich.console import Console
from standin_server import StandinServer

import fleetgen.cli.generate as cli_generate
from fleetgen.generate import GenerateConfig, generate


def test_a_request_never_answered_is_named_cancelled_and_resent_and_nothing_is_lost(tmp_path, monkeypatch):
    server = StandinServer(never_answer_every=50)
    url = server.start()
    n = 200
    try:
        write_prompts(tmp_path / "p.jsonl", n)
        stats = generate(
            GenerateConfig(
                prompts=tmp_path / "p.jsonl",
                output_dir=tmp_path / "out",
                endpoints=[url],
                model="standin",
                max_tokens=16,
                concurrency=8,
                stall_floor_s=2.0,
                hedge=False,
                warmup=False,
            ),
            handle_signals=False,
        )
    finally:
        server.release()
        server.stop()
    assert stats.ok == n and stats.errors == 0
    assert_exactly_once(tmp_path / "out", [f"p{i}" for i in range(n)], 1)
    (r,) = stats.replicas
    assert server.hung >= 4  # requests 50, 100, 150 and 200 at least (re-sent ones add to the count)
    # Every row is done, so each unanswered request was cancelled and re-sent (a slow answer on a loaded
    # machine may be too, hence >=); each re-send is a retry.
    assert r.stalled >= server.hung and stats.retries >= r.stalled

    saved = orjson.loads((tmp_path / "out" / "stats.json").read_bytes())["replicas"]
    assert saved[0]["stalled"] == r.stalled

    console = Console(record=True, width=300)
    monkeypatch.setattr(cli_generate, "console", console)
    cli_generate.print_summary(stats, tmp_path / "out")
    header, row = [line for line in console.export_text().splitlines() if "stalled" in line or "replica 0" in line][:2]
    cells = [c.strip() for c in row.split("│")]
    names = [c.strip() for c in header.split("┃")]
    assert cells[names.index("stalled")] == str(r.stalled)


def test_status_names_the_replica_whose_requests_were_resent():
    from fleetgen.cli.fleet import job_line
    from fleetgen.fleet.jobs import JobProgress

    job = JobProgress(
        pid=1,
        create_time=0.0,
        output_dir="out",
        updated_at=0.0,
        total=10,
        done=5,
        ok=5,
        errors=0,
        resumed=0,
        samples_per_s=1.0,
        output_tokens_per_s=10.0,
        stalled={"http://h:30000": 3},
    )
    assert "re-sent after no answer:[/] 3 on http://h:30000" in job_line(job, True)
    assert "re-sent" not in job_line(job.model_copy(update={"stalled": {}}), True)


def test_a_replica_holding_requests_without_answers_is_said_once_per_silence(caplog):
    import asyncio
    import logging

    from fleetgen.generate.dispatch.replica import Replica
    from fleetgen.generate.dispatch.stall import say_when_quiet

    r = Replica(0, "http://h:30000", 8)
    r.stats.outstanding, r.stats.first_request_at, r.stats.last_answer_at = 3, 0.0, 5.0
    now = [100.0]

    async def go():
        task = asyncio.create_task(say_when_quiet(lambda: [r], lambda: now[0], quiet_s=0.03))
        await asyncio.sleep(0.1)  # several checks of the same silence: said once
        r.stats.last_answer_at = 99.0  # it answered, then fell silent again
        await asyncio.sleep(0.1)
        task.cancel()

    with caplog.at_level(logging.WARNING, logger="fleetgen.generate.dispatch.stall"):
        asyncio.run(go())
    said = [m for m in caplog.messages if "no answer for" in m]
    assert len(said) == 2 and "replica 0 (http://h:30000): no answer for 95s, 3 request(s) in flight" in said[0]
