"""`generate --shards N` with local processes: one command, one output; a shard killed with -9 is restarted and resumes.

Against a STAND-IN server (tests/generate/standin_server.py) with a per-token delay, so a shard can
be killed mid-run; the real engine cannot be paced that way. The Ray runner: test_generate_shards_ray.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import psutil
import pytest
from helpers import keys_across_shards, write_prompts
from standin_server import StandinServer

from fleetgen.errors import ConfigError
from fleetgen.export.results import iter_results
from fleetgen.generate import GenerateConfig, generate
from fleetgen.generate.dispatch.target import resolve_target
from fleetgen.generate.shards.outcome import check_visible
from fleetgen.generate.shards.run import shard_configs

SRC = Path(__file__).resolve().parents[2] / "src"


def holder_of(path: Path, among: list[psutil.Process]) -> psutil.Process | None:
    """The process (of `among`) that has `path` open: the one writing that shard's journal."""
    for p in among:
        try:
            if any(f.path == str(path) for f in p.open_files()):
                return p
        except psutil.Error:
            continue
    return None


def wait_for_bytes(path: Path, size: int, timeout: float = 60) -> None:
    t0 = time.monotonic()
    while (not path.exists() or path.stat().st_size < size) and time.monotonic() - t0 < timeout:
        time.sleep(0.01)


def test_shard_configs_split_the_window_and_fix_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = GenerateConfig(
        prompts=Path("p.jsonl"), output_dir=Path("out"), endpoints=["http://127.0.0.1:1"], shards=3, concurrency=64
    )
    parts = shard_configs(cfg)
    assert [str(c.sharding.shard) for c in parts] == ["0/3", "1/3", "2/3"] and {c.sharding.shards for c in parts} == {
        None
    }
    assert {c.routing.concurrency for c in parts} == {
        22
    }  # 3 x 22 >= 64: each replica sees what one process would put on it
    assert all(c.prompts == tmp_path / "p.jsonl" and c.output_dir == tmp_path / "out" for c in parts)
    assert {c.sharding.replica_slice for c in parts} == {None}  # fewer replicas than shards: all share the one
    assert [c.observe.metrics_port for c in shard_configs(cfg.updated(metrics_port=9400))] == [9400, 9401, 9402]
    fleet = [f"http://127.0.0.1:{port}" for port in range(9001, 9006)]
    sliced = shard_configs(cfg.updated(endpoints=fleet))
    assert [str(c.sharding.replica_slice) for c in sliced] == ["0/3", "1/3", "2/3"]
    assert {c.routing.concurrency for c in sliced} == {64}
    mine = [resolve_target(c).endpoints for c in sliced]
    assert sorted(e for m in mine for e in m) == fleet and mine[0] == [fleet[0], fleet[3]]  # disjoint, all covered
    with pytest.raises(ValueError, match="not both"):
        GenerateConfig(prompts=Path("p"), output_dir=Path("o"), endpoints=["http://x"], shards=2, shard="0/2")
    with pytest.raises(ConfigError, match="run_shards"):
        generate(cfg, handle_signals=False)  # one process never silently runs all shards as one


def test_a_node_that_does_not_see_the_output_directory_is_told_so(tmp_path):
    (tmp_path / "p.jsonl").write_text("")
    cfg = GenerateConfig(prompts=tmp_path / "p.jsonl", output_dir=tmp_path / "out", endpoints=["http://x"])
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / ".fleetgen-shards-abc").write_text("abc")
    check_visible(cfg, ".fleetgen-shards-abc", "abc", "node A")
    with pytest.raises(Exception, match="not shared with node B"):
        check_visible(cfg, ".fleetgen-shards-abc", "another driver's token", "node B")
    with pytest.raises(Exception, match="not visible on node C"):
        check_visible(cfg.updated(prompts=tmp_path / "elsewhere.jsonl"), ".fleetgen-shards-abc", "abc", "node C")


def test_kill9_of_one_shard_process_is_restarted_and_exactly_once(tmp_path, standin):
    n = 240
    prompts = write_prompts(tmp_path / "p.jsonl", n)
    out = tmp_path / "out"
    expected = {(f"p{i}", k) for i in range(n) for k in range(2)}
    env = {"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"}
    driver = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fleetgen.cli.app",
            "generate",
            str(prompts),
            "-o",
            str(out),
            "--endpoint",
            standin,
            "--model",
            "standin",
            "--samples",
            "2",
            "--max-tokens",
            "8",
            "--concurrency",
            "16",
            "--no-hedge",
            "--shards",
            "2",
            "--shard-runner",
            "process",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    victim_file = out / "results.shard-1-of-2.jsonl"
    wait_for_bytes(victim_file, 2000)
    victim = holder_of(victim_file, psutil.Process(driver.pid).children())
    assert victim is not None and driver.poll() is None, "shard 1 finished before its kill: make the job longer"
    before = keys_across_shards(out)
    victim.send_signal(signal.SIGKILL)
    _, err = driver.communicate(timeout=120)
    assert driver.returncode == 0, err[-2000:]
    assert "shard 1/2 died (SIGKILL)" in err and "resumes from its journal" in err
    keys = keys_across_shards(out)
    assert max(keys.values()) == 1 and set(keys) == expected and set(before) < expected
    restarted = orjson.loads((out / "stats.shard-1-of-2.json").read_bytes())
    assert restarted["rows"]["resumed"] > 0  # the restart resumed the killed shard's journal
    assert sorted((r["id"], r["sample"]) for r in iter_results(out)) == sorted(expected)
    assert not list(out.glob(".fleetgen-shards-*"))


def test_ctrl_c_on_the_process_group_stops_each_shard_once_and_cleanly(tmp_path):
    """SIGINT to the whole process group, as a terminal sends Ctrl-C: every sample in flight is finished and recorded.

    Each shard must get one SIGINT (a clean stop), not two (the terminal's and the parent's forward:
    the second abandons the samples in flight). The STAND-IN counts the requests it got; with no
    retries and one request per sample, a clean stop records exactly as many samples as were sent.
    That holds only within the stop grace, so the grace is set far above what the samples in flight
    take even on a loaded machine (8 tokens at 10 ms), and a shard that gives up says why.
    """
    grace_s = 90
    server = StandinServer(delay_per_token_s=0.01, max_concurrent=32)
    url = server.start()
    try:
        prompts = write_prompts(tmp_path / "p.jsonl", 2000)
        out = tmp_path / "out"
        env = {"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"}
        driver = subprocess.Popen(  # a session of its own: its process group is what a terminal's Ctrl-C reaches
            [
                sys.executable,
                "-m",
                "fleetgen.cli.app",
                "generate",
                str(prompts),
                "-o",
                str(out),
                "--endpoint",
                url,
                "--model",
                "standin",
                "--samples",
                "2",
                "--max-tokens",
                "8",
                "--concurrency",
                "16",
                "--no-hedge",
                "--shards",
                "2",
                "--shard-runner",
                "process",
                "--no-warmup",
                "--stop-grace-s",
                str(grace_s),
            ],  # the stand-in counts job requests
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        for name in ("results.shard-0-of-2.jsonl", "results.shard-1-of-2.jsonl"):
            wait_for_bytes(out / name, 2000)
        assert driver.poll() is None, "the job finished before the stop: make it longer"
        os.killpg(driver.pid, signal.SIGINT)
        _, err = driver.communicate(timeout=grace_s + 60)
        assert driver.returncode == 130, err[-2000:]
        assert "abandoning" not in err, err[-2000:]  # neither a second SIGINT nor the grace's end
        keys = keys_across_shards(out)
        assert max(keys.values()) == 1
        assert sum(keys.values()) == server.requests, (
            f"{server.requests - sum(keys.values())} sample(s) sent but not recorded: abandoned within the grace"
        )
        for i in range(2):
            stats = orjson.loads((out / f"stats.shard-{i}-of-2.json").read_bytes())
            assert stats["interrupted"] and stats["stopped_reason"] == "stopped by SIGINT"
        assert err.count("stopping: waiting up to") == 2, err[-2000:]  # once per shard, no abandonment
    finally:
        server.stop()


def test_the_runner_follows_the_fleet_states_backend(tmp_path):
    from fleetgen.fleet.state import FleetState, ReplicaState, write_state
    from fleetgen.generate.shards.run import choose_runner

    replica = ReplicaState(
        index=0,
        endpoint="http://10.0.0.1:30000",
        pid=1,
        create_time=0.0,
        engine="vllm",
        model="m",
        served_model_name="m",
        log_path="x.log",
        command=["serve"],
        effective_config={"model": "m"},
    )
    for backend, address, want in (
        ("local", None, ("process", None)),
        ("ray", "10.0.0.1:6379", ("ray", "10.0.0.1:6379")),
    ):
        state = tmp_path / backend
        state.mkdir()
        write_state(
            state,
            FleetState(
                engine="vllm",
                model="m",
                served_model_name="m",
                replicas=[replica],
                backend=backend,
                ray_address=address,
            ),
        )
        cfg = GenerateConfig(prompts=tmp_path / "p.jsonl", output_dir=tmp_path / "o", fleet_state=state, shards=2)
        assert choose_runner(cfg) == want
        assert choose_runner(cfg.updated(shard_runner="process")) == ("process", None)
    endpoints = GenerateConfig(
        prompts=tmp_path / "p.jsonl", output_dir=tmp_path / "o", endpoints=["http://x"], shards=2
    )
    assert choose_runner(endpoints) == ("process", None)
    assert choose_runner(endpoints.updated(shard_runner="ray")) == ("ray", "auto")  # RAY_ADDRESS, as `ray` reads it
