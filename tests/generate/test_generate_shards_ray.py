"""`generate --shards N` as Ray tasks on a local multi-node Ray cluster; one shard's worker killed with -9.

The cluster is real (a head without CPUs and two 1-CPU worker nodes, so the two shard tasks run on
different nodes); the server is a STAND-IN (tests/generate/standin_server.py) paced per token, so a
shard can be killed mid-run, which the real engine cannot be made to allow. Ray starts the killed
task again (max_retries) and the new attempt resumes from the shard's journal.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import psutil
import pytest
from helpers import keys_across_shards, write_prompts
from test_generate_shards import holder_of, wait_for_bytes

from fleetgen.errors import FleetgenError
from fleetgen.export.results import iter_results
from fleetgen.generate import GenerateConfig, ShardDone, run_shards

ray = pytest.importorskip("ray")

MIB = 2**20
# A head, two worker nodes and two shard workers; no engine replicas.
NEEDS_GIB = 4


@pytest.fixture(scope="module")
def cluster():
    free = psutil.virtual_memory().available
    if free < NEEDS_GIB * 2**30:
        pytest.skip(f"needs >= {NEEDS_GIB} GiB of free memory for a local Ray cluster; {free / 2**30:.1f} GiB free")
    from ray.cluster_utils import Cluster

    mp = pytest.MonkeyPatch()
    mp.setenv("RAY_memory_monitor_refresh_ms", "0")  # Ray's OOM killer judges a machine others share here
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "object_store_memory": 80 * MIB})
    try:
        for _ in range(2):
            c.add_node(num_cpus=1, object_store_memory=80 * MIB)
        c.wait_for_nodes()
        mp.setenv("RAY_ADDRESS", c.address)  # --endpoint jobs find the cluster as `ray` would
        yield c
    finally:
        ray.shutdown()
        c.shutdown()
        mp.undo()


def _cfg(prompts: Path, out: Path, url: str, **kw) -> GenerateConfig:
    return GenerateConfig(
        prompts=prompts,
        output_dir=out,
        endpoints=[url],
        model="standin",
        samples=2,
        max_tokens=8,
        concurrency=16,
        hedge=False,
        shards=2,
        shard_runner="ray",
        **kw,
    )


def test_kill9_of_one_shard_task_worker_is_retried_by_ray_and_exactly_once(cluster, standin, tmp_path):
    import threading

    n = 400
    prompts = write_prompts(tmp_path / "p.jsonl", n)
    out = tmp_path / "out"
    expected = {(f"p{i}", k) for i in range(n) for k in range(2)}
    victim_file = out / "results.shard-1-of-2.jsonl"
    killed: list[psutil.Process] = []

    def kill_shard_1() -> None:
        wait_for_bytes(victim_file, 2000)
        victim = holder_of(victim_file, psutil.Process().children(recursive=True))
        if victim is not None:
            killed.append(victim)
            victim.send_signal(signal.SIGKILL)

    killer = threading.Thread(target=kill_shard_1)
    killer.start()
    run = run_shards(_cfg(prompts, out, standin))
    killer.join()
    assert killed, "no Ray worker held shard 1's journal when it had 2,000 bytes: make the job longer"
    assert run.runner == "ray" and all(isinstance(o, ShardDone) for o in run.outcomes)
    assert str(killed[0].pid) not in run.outcomes[1].where  # a new worker finished shard 1
    assert run.outcomes[1].stats["rows"]["resumed"] > 0  # ...by resuming its journal
    keys = keys_across_shards(out)
    assert max(keys.values()) == 1 and set(keys) == expected
    assert sorted((r["id"], r["sample"]) for r in iter_results(out)) == sorted(expected)
    assert run.stats["rows"]["ok"] + run.stats["rows"]["resumed"] == 2 * n
    assert not list(out.glob(".fleetgen-shards-*"))
    # Run again: every shard finds its journal complete; nothing is sent twice.
    again = run_shards(_cfg(prompts, out, standin))
    assert again.stats["rows"]["ok"] == 0 and max(keys_across_shards(out).values()) == 1


def test_a_shard_that_fails_on_purpose_is_reported_not_retried(cluster, standin, tmp_path):
    prompts = write_prompts(tmp_path / "p.jsonl", 10)
    out = tmp_path / "out"
    run_shards(_cfg(prompts, out, standin))
    with pytest.raises(FleetgenError, match=r"shard 0/2 failed: .*(sampling|job)") as e:
        run_shards(_cfg(prompts, out, standin, temperature=0.1))  # another job in the same directory
    assert "and 1 more" in e.value.message


def _opened_by_another(paths: list[Path], but: int) -> bool:
    """Some process of this test's tree other than `but` has one of `paths` open."""
    names = {str(p) for p in paths}
    for p in psutil.Process().children(recursive=True):
        if p.pid == but:
            continue
        try:
            if names & {f.path for f in p.open_files()}:
                return True
        except psutil.Error:
            continue
    return False


def test_a_shard_retried_while_its_old_attempt_still_runs_waits_for_it_and_rows_are_exactly_once(cluster, tmp_path):
    """What Ray does after a partition: the same shard task again on another node while the old worker still runs.

    The STAND-IN holds the old attempt's window unanswered until told (no timing), so it is certainly still writing
    when the retry starts; the retry (same run: the driver's token) waits for its lease, then resumes what it left.
    """
    import orjson
    from standin_server import StandinServer

    from fleetgen.errors import LeaseHeldError
    from fleetgen.fleet.ray_backend import connect
    from fleetgen.generate import generate
    from fleetgen.generate.config.partition import Shard
    from fleetgen.generate.journal.lease import lease_name
    from fleetgen.generate.shards.ray_tasks import shard_task
    from fleetgen.generate.shards.run import MARKER_PREFIX

    n, window = 40, 2
    server = StandinServer(hold_first=window)
    url = server.start()
    try:
        prompts = write_prompts(tmp_path / "p.jsonl", n).resolve()
        out = (tmp_path / "out").resolve()
        out.mkdir()
        token = "the-driver-run"
        marker = f"{MARKER_PREFIX}{token}"
        (out / marker).write_text(token)
        cfg = GenerateConfig(
            prompts=prompts,
            output_dir=out,
            endpoints=[url],
            model="standin",
            max_tokens=8,
            concurrency=window,
            hedge=False,
            shard="1/2",
            commit_interval_s=0.0,
            warmup=False,
        )  # hold_first holds the job's first requests, not a warm-up
        lease, journal = out / lease_name(".shard-1-of-2"), out / "results.shard-1-of-2.jsonl"

        def holder() -> dict:
            try:
                return orjson.loads(lease.read_bytes())
            except (OSError, orjson.JSONDecodeError):
                return {}

        connect(cluster.address)
        old = shard_task.options(max_retries=0).remote(cfg, marker, token)
        t0 = time.monotonic()
        while not (holder().get("group") == token and server.requests >= window):
            assert time.monotonic() - t0 < 120, "the old attempt never took its lease with its window in flight"
            time.sleep(0.02)
        old_pid = holder()["pid"]
        retry = shard_task.options(max_retries=0).remote(cfg, marker, token)
        while not _opened_by_another([lease, journal], old_pid):  # the retry has started: it waits on the lease
            assert time.monotonic() - t0 < 240, "the retry never started"
            time.sleep(0.02)
        # A writer of another run is refused at once, naming the holder.
        with pytest.raises(LeaseHeldError, match=f"pid {old_pid}"):
            generate(cfg, handle_signals=False)
        server.release()
        first, second = ray.get([old, retry], timeout=300)
    finally:
        server.release()
        server.stop()
    owned = sum(Shard(1, 2).owns(f"p{i}") for i in range(n))
    assert first["stats"]["rows"]["ok"] == owned
    assert second["stats"]["rows"] == {**second["stats"]["rows"], "ok": 0, "resumed": owned}
    keys = keys_across_shards(out)
    assert len(keys) == owned and max(keys.values()) == 1
