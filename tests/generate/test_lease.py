"""One writer per journal: a second writer is refused naming the holder; a gone holder's lease is taken over; a
superseded writer is fenced (its next commit refused, nothing appended).

The two-`generate` test drives a real `fleetgen generate` process against a STAND-IN server
(tests/generate/standin_server.py) that holds the first requests unanswered until told, so the first run is
certainly still writing when the second starts (no timing). The Ray retry: test_generate_shards_ray.py.
"""

from __future__ import annotations

import fcntl
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from helpers import assert_exactly_once, write_prompts
from standin_server import StandinServer

from fleetgen.errors import LeaseHeldError, LeaseLostError
from fleetgen.generate import GenerateConfig, generate
from fleetgen.generate.journal.directory import Journal
from fleetgen.generate.journal.lease import Lease, lease_name
from fleetgen.generate.journal.linekey import dumps_line

SRC = Path(__file__).resolve().parents[2] / "src"


def _holder(path: Path) -> dict | None:
    try:
        return orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None


def _wait_until(cond, what: str, timeout: float = 120) -> None:
    """Wait for an event (never for a time): fails only if it does not happen at all."""
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.02)


def test_a_second_writer_is_refused_naming_the_holder_and_the_lease_is_free_after_release(tmp_path):
    first = Lease.acquire(tmp_path)
    with pytest.raises(
        LeaseHeldError, match=rf"being written by pid {os.getpid()} on host {socket.gethostname()}"
    ) as e:
        Lease.acquire(tmp_path)
    assert "writer.lock" in e.value.message and "another --output" in e.value.hint
    first.release()
    assert not (tmp_path / lease_name()).exists()
    Lease.acquire(tmp_path).release()
    # Shards have a lease each: one shard's writer does not block another's.
    a, b = Lease.acquire(tmp_path, ".shard-0-of-2"), Lease.acquire(tmp_path, ".shard-1-of-2")
    a.release()
    b.release()


def test_the_lease_of_a_holder_that_is_gone_is_taken_over_and_a_live_one_is_not(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="fleetgen")
    path = tmp_path / lease_name()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    path.write_bytes(
        orjson.dumps({"host": socket.gethostname(), "pid": dead.pid, "token": "old", "since": time.time()})
    )
    lease = Lease.acquire(tmp_path)  # its process died: the kernel dropped its lock, and its pid is gone
    assert f"took over the lease on writer.lock of pid {dead.pid}" in caplog.text
    assert _holder(path)["pid"] == os.getpid() and _holder(path)["token"] == lease.token
    lease.release()
    # Another host's holder whose lock is free (released, or lost with its node): taken over.
    path.write_bytes(orjson.dumps({"host": "node-b", "pid": 1, "token": "old", "since": time.time()}))
    Lease.acquire(tmp_path).release()
    assert "pid 1 on host node-b" in caplog.text
    # A live process of this host named while the lock is free (a file system whose flock does not exclude): refused.
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        _wait_until(lambda: live.pid and os.path.exists(f"/proc/{live.pid}"), "the process started")
        path.write_bytes(
            orjson.dumps({"host": socket.gethostname(), "pid": live.pid, "token": "x", "since": time.time() + 5})
        )
        with pytest.raises(LeaseHeldError, match=f"pid {live.pid}"):
            Lease.acquire(tmp_path)
    finally:
        live.kill()
        live.wait()


def test_a_live_holder_stays_live_when_the_wall_clock_steps(tmp_path, monkeypatch):
    """A laptop resumed from suspend: psutil's create_time moves with the clock, the lease's since does not."""
    import psutil

    path = tmp_path / lease_name()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        _wait_until(lambda: live.pid and os.path.exists(f"/proc/{live.pid}"), "the process started")
        held = {
            "host": socket.gethostname(),
            "pid": live.pid,
            "token": "x",
            "since": time.time() + 1,
            "boot": psutil.boot_time(),
        }
        real = psutil._psplatform.boot_time
        monkeypatch.setattr(psutil._psplatform, "boot_time", lambda: real() + 3600.0)
        path.write_bytes(orjson.dumps(held))
        with pytest.raises(LeaseHeldError, match=f"pid {live.pid}"):
            Lease.acquire(tmp_path)
        path.write_bytes(orjson.dumps({k: v for k, v in held.items() if k != "boot"}))  # a lease of before: taken
        Lease.acquire(tmp_path).release()
    finally:
        live.kill()
        live.wait()


def test_a_superseded_writer_is_fenced_its_next_commit_refused_and_nothing_appended(tmp_path):
    old = Lease.acquire(tmp_path)
    journal, _ = Journal.open(tmp_path, retry_errors=False, lease=old)
    journal.commit([dumps_line({"id": "a", "sample": 0})], [])
    # Its lock is lost without it knowing (what a partition does
    # to a lock on shared storage): another writer takes over.
    fcntl.flock(old.fd, fcntl.LOCK_UN)
    new = Lease.acquire(tmp_path)
    size = (tmp_path / "results.jsonl").stat().st_size
    with pytest.raises(LeaseLostError, match=rf"lost its lease .*now written by pid {os.getpid()}"):
        journal.commit([dumps_line({"id": "b", "sample": 0})], [dumps_line({"id": "c", "sample": 0})])
    assert (tmp_path / "results.jsonl").stat().st_size == size and not (tmp_path / "errors.jsonl").read_bytes()
    old.release()  # gives up nothing of the new holder's
    assert _holder(tmp_path / lease_name())["token"] == new.token
    fresh, _ = Journal.open(tmp_path, retry_errors=False, lease=new)
    fresh.commit([dumps_line({"id": "b", "sample": 0})], [])
    # A lease file removed under a writer fences it too.
    (tmp_path / lease_name()).unlink()
    with pytest.raises(LeaseLostError, match="removed"):
        fresh.commit([dumps_line({"id": "d", "sample": 0})], [])
    assert [orjson.loads(x)["id"] for x in (tmp_path / "results.jsonl").read_bytes().splitlines()] == ["a", "b"]
    journal.close()
    fresh.close()
    new.release()


def test_two_generate_on_one_output_the_second_is_refused_naming_the_holder_and_rows_are_exactly_once(tmp_path):
    n, window = 40, 4
    server = StandinServer(hold_first=window)  # the first run's window stays in flight until released
    url = server.start()
    try:
        prompts = write_prompts(tmp_path / "p.jsonl", n)
        out = tmp_path / "out"
        args = [
            "generate",
            str(prompts),
            "-o",
            str(out),
            "--endpoint",
            url,
            "--max-tokens",
            "8",
            "--no-warmup",
            "--concurrency",
            str(window),
            "--no-hedge",
        ]
        first = subprocess.Popen(
            [sys.executable, "-m", "fleetgen.cli.app", *args],
            env={**os.environ, "PYTHONPATH": str(SRC)},
            stderr=subprocess.PIPE,
            text=True,
        )
        _wait_until(
            lambda: (_holder(out / lease_name()) or {}).get("pid") == first.pid and server.requests >= window,
            "the first run holds the lease with its window in flight",
        )
        second = GenerateConfig(
            prompts=prompts,
            output_dir=out,
            endpoints=[url],
            max_tokens=8,
            concurrency=window,
            warmup=False,
            hedge=False,
            commit_interval_s=0.0,
        )
        with pytest.raises(LeaseHeldError, match=rf"{out} is being written by pid {first.pid} on host"):
            generate(second, handle_signals=False)
        server.release()
        _, err = first.communicate(timeout=300)
        assert first.returncode == 0, err
        results, _ = assert_exactly_once(out, [f"p{i}" for i in range(n)], 1)
        assert len((out / "results.jsonl").read_bytes().splitlines()) == n
        assert not (out / lease_name()).exists()
        again = generate(second, handle_signals=False)  # the first is done: its lease is free, nothing is left
        assert again.ok == 0 and again.resumed == n
    finally:
        server.release()
        server.stop()
