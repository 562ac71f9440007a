"""Against a STAND-IN server (tests/generate/standin_server.py): 500s, hangs, and a fleet that vanishes."""

from __future__ import annotations

import threading
import time

import pytest
from helpers import assert_exactly_once, write_prompts
from standin_server import StandinServer

from fleetgen.errors import NoReplicaError
from fleetgen.generate import GenerateConfig, generate


def cfg(tmp_path, endpoints, **kw) -> GenerateConfig:
    base = dict(
        prompts=tmp_path / "p.jsonl",
        output_dir=tmp_path / "out",
        endpoints=endpoints,
        max_tokens=8,
        concurrency=4,
        timeout_base_s=1.0,
        timeout_per_token_s=0.0,
        backoff_base_s=0.05,
        backoff_max_s=0.2,
        replica_cooldown_s=0.2,
        hedge=False,
        commit_interval_s=0.0,
        warmup=False,  # these script faults of the job's own requests (test_warmup.py: the warm-up's)
    )
    base.update(kw)
    return GenerateConfig(**base)


def test_client_retries_500s_and_hangs_then_completes(tmp_path):
    server = StandinServer(fail_first=3, hang_next=2, hang_s=3.0)
    url = server.start()
    try:
        write_prompts(tmp_path / "p.jsonl", 20)
        stats = generate(cfg(tmp_path, [url]), handle_signals=False)
    finally:
        server.stop()
    assert server.failed == 3 and server.hung == 2
    assert stats.ok == 20 and stats.errors == 0
    assert stats.replicas[0].failures == 5  # three 500s, two timeouts, all retried
    results, _ = assert_exactly_once(tmp_path / "out", [f"p{i}" for i in range(20)], 1)
    assert all(r["messages"][-1]["content"].startswith("the stand-in") for r in results)


def test_persistent_500_becomes_a_row_error_with_the_servers_message(tmp_path):
    server = StandinServer(fail_first=10_000)
    url = server.start()
    try:
        write_prompts(tmp_path / "p.jsonl", 2)
        stats = generate(cfg(tmp_path, [url], max_attempts=2, give_up_after_s=30), handle_signals=False)
    finally:
        server.stop()
    _, errors = assert_exactly_once(tmp_path / "out", ["p0", "p1"], 1)
    assert stats.errors == 2
    assert all("stand-in: scripted internal error" in e["reason"] and e["kind"] == "failed" for e in errors)


def _stop_after_answers(server: StandinServer, answers: int) -> None:
    """Stop the server once it has answered `answers` requests: mid-job by its own count, not after a fixed
    time (a loaded machine could spend that long starting the job and record nothing before the stop)."""
    while server.completed < answers:
        time.sleep(0.005)
    server.stop()


def test_lost_fleet_stops_cleanly_and_a_resume_finishes_exactly_once(tmp_path):
    server = StandinServer(delay_per_token_s=0.02, max_concurrent=4)
    url = server.start()
    port = server.port
    write_prompts(tmp_path / "p.jsonl", 150)
    threading.Thread(target=_stop_after_answers, args=(server, 10), daemon=True).start()
    with pytest.raises(NoReplicaError, match="no replica has answered"):
        generate(cfg(tmp_path, [url], give_up_after_s=1.0, model="standin"), handle_signals=False)
    done_first = len((tmp_path / "out" / "results.jsonl").read_bytes().splitlines())
    assert 0 < done_first < 150
    again = StandinServer()
    again.start(port)
    try:
        stats = generate(cfg(tmp_path, [url], model="standin"), handle_signals=False)
    finally:
        again.stop()
    assert stats.resumed == done_first
    assert_exactly_once(tmp_path / "out", [f"p{i}" for i in range(150)], 1)


def test_sigterm_stops_gracefully_and_resume_completes(tmp_path):
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    from real_fleet import free_port_base

    port = free_port_base(1, 18500)
    server = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).with_name("standin_server.py")),
            "--port",
            str(port),
            "--delay-per-token",
            "0.02",
            "--max-concurrent",
            "8",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        write_prompts(tmp_path / "p.jsonl", 200)
        args = [
            sys.executable,
            "-m",
            "fleetgen.cli.app",
            "generate",
            str(tmp_path / "p.jsonl"),
            "-o",
            str(tmp_path / "out"),
            "--endpoint",
            f"http://127.0.0.1:{port}",
            "--model",
            "standin",
            "--max-tokens",
            "8",
            "--concurrency",
            "8",
        ]
        time.sleep(1.0)
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        results = tmp_path / "out" / "results.jsonl"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not results.exists() or results.stat().st_size < 2000):
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err[-1500:]
        assert "stopping: waiting up to" in err
        stats = __import__("json").loads((tmp_path / "out" / "stats.json").read_text())
        assert stats["interrupted"] and 0 < stats["rows"]["ok"] < 200
        resumed = subprocess.run(args, capture_output=True, text=True, timeout=120)
        assert resumed.returncode == 0, resumed.stderr[-1500:]
        assert_exactly_once(tmp_path / "out", [f"p{i}" for i in range(200)], 1)
    finally:
        server.terminate()
        server.wait()
