"""Cold fleets compile once: replica 0 starts alone, then its caches seed the others."""

from __future__ import annotations

from pathlib import Path

from fleetgen.fleet.config import FleetConfig
from fleetgen.fleet.engines import ReplicaSpec
from fleetgen.fleet.launcher import seed_caches, warm_first


def specs(tmp_path: Path, n: int) -> list[ReplicaSpec]:
    return [
        ReplicaSpec(index=i, model="/m", served_model_name="m", host="127.0.0.1", port=30000 + i,
                    gpus=(i,), cache_dir=tmp_path / f"replica-{i}")
        for i in range(n)
    ]


def test_cold_compiled_fleet_starts_replica_0_first(tmp_path):
    assert warm_first(FleetConfig(state_dir=tmp_path), specs(tmp_path, 2))


def test_cpu_fleets_start_at_once(tmp_path):
    from dataclasses import replace

    cpu = [replace(s, gpus=()) for s in specs(tmp_path, 2)]
    assert not warm_first(FleetConfig(state_dir=tmp_path), cpu), "measured slower on CPU (BENCHMARKS.md)"


def test_no_staging_when_warm_eager_single_or_disabled(tmp_path):
    s = specs(tmp_path, 2)
    assert not warm_first(FleetConfig(state_dir=tmp_path, enforce_eager=True), s)
    assert not warm_first(FleetConfig(state_dir=tmp_path, warm_first=False), s)
    assert not warm_first(FleetConfig(state_dir=tmp_path), s[:1])
    (tmp_path / "replica-0" / "torch_compile_cache").mkdir(parents=True)
    (tmp_path / "replica-0" / "torch_compile_cache" / "graph.py").write_text("x")
    assert not warm_first(FleetConfig(state_dir=tmp_path), s), "a warm cache needs no staging"


def test_seed_copies_into_empty_caches_only(tmp_path):
    s = specs(tmp_path, 3)
    (tmp_path / "replica-0" / "a").mkdir(parents=True)
    (tmp_path / "replica-0" / "a" / "kernel.so").write_text("compiled")
    (tmp_path / "replica-2").mkdir()
    (tmp_path / "replica-2" / "own.txt").write_text("mine")
    seed_caches(s[0], s[1:])
    assert (tmp_path / "replica-1" / "a" / "kernel.so").read_text() == "compiled"
    assert not (tmp_path / "replica-2" / "a").exists(), "a cache with files of its own is left alone"
