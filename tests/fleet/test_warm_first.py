"""Cold fleets compile once: replica 0 starts alone, then the others start and load what it compiled.

Local GPU replicas of one engine, model and GPU kind share one set of compile caches
(replica_plan.shared_cache_dir); CPU replicas, which start together, keep one set per slot.
"""

from __future__ import annotations

from pathlib import Path

from fleetgen.fleet import local
from fleetgen.fleet.config import FleetConfig
from fleetgen.fleet.devices import gpu_kind
from fleetgen.fleet.engines import ReplicaSpec, get_engine
from fleetgen.fleet.launcher import warm_first
from fleetgen.fleet.replica_plan import plan_replicas
from fleetgen.gpu_info import GpuInfo


def specs(tmp_path: Path, n: int) -> list[ReplicaSpec]:
    return [
        ReplicaSpec(
            index=i,
            model="/m",
            served_model_name="m",
            host="127.0.0.1",
            port=30000 + i,
            gpus=(i,),
            cache_dir=tmp_path / f"replica-{i}",
        )
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


def _plan(monkeypatch, tmp_path, engine="sglang", model="/models/m", gpus=1, replicas=8, per_gpu=8, **kw):
    fake = [GpuInfo(i, "NVIDIA H200", 141 << 30, (9, 0)) for i in range(gpus)]
    monkeypatch.setattr(local, "discover_gpus", lambda: fake)
    monkeypatch.setenv("FLEETGEN_CACHE", str(tmp_path / "cache"))
    cfg = FleetConfig(
        engine=engine,
        model=model,
        gpus="all",
        replicas=replicas,
        replicas_per_gpu=per_gpu,
        state_dir=tmp_path / "state",
        **kw,
    )
    return plan_replicas(cfg, model, local.LocalBackend())


def test_eight_replicas_on_one_gpu_share_one_set_of_compile_caches(monkeypatch, tmp_path):
    specs = _plan(monkeypatch, tmp_path)
    dirs = {s.cache_dir for s in specs}
    assert len(dirs) == 1, "each replica compiling into its own cache rebuilds what replica 0 built (H200: 36 s vs 3 s)"
    (shared,) = dirs
    assert shared.name.startswith("sglang-m-") and shared.name.endswith("-nvidia-h200-sm90-x1")
    eng = get_engine("sglang")
    envs = [eng.environment(s) for s in specs]
    for key in (
        "TVM_FFI_CACHE_DIR",
        "SGLANG_DG_CACHE_DIR",
        "SGLANG_CACHE_DIR",
        "TRITON_CACHE_DIR",
        "TORCHINDUCTOR_CACHE_DIR",
        "FLASHINFER_WORKSPACE_BASE",
    ):
        assert len({e[key] for e in envs}) == 1, key
    assert envs[0]["TVM_FFI_CACHE_DIR"] == str(shared / "tvm-ffi")  # where sgl_kernel's six JIT kernels go


def test_the_shared_caches_are_kept_apart_by_model_engine_and_gpu_kind(monkeypatch, tmp_path):
    a = _plan(monkeypatch, tmp_path)[0].cache_dir
    assert _plan(monkeypatch, tmp_path, model="/models/other")[0].cache_dir != a
    assert _plan(monkeypatch, tmp_path, engine="vllm")[0].cache_dir != a
    assert _plan(monkeypatch, tmp_path, gpus=2, replicas=1, per_gpu=1, tp=2)[0].cache_dir != a
    assert (
        gpu_kind([GpuInfo(0, "NVIDIA RTX PRO 6000 Blackwell", 1, (12, 0))]) == "nvidia-rtx-pro-6000-blackwell-sm120-x1"
    )


def test_warm_first_applies_to_the_shared_cache_cold_and_not_warm(monkeypatch, tmp_path):
    specs = _plan(monkeypatch, tmp_path)
    cfg = FleetConfig(state_dir=tmp_path)
    assert warm_first(cfg, specs)
    (specs[0].cache_dir / "tvm-ffi").mkdir(parents=True)
    (specs[0].cache_dir / "tvm-ffi" / "kernel.so").write_text("compiled")
    assert not warm_first(cfg, specs), "a warm shared cache: every replica loads from it"


def test_cpu_replicas_keep_a_cache_per_slot(monkeypatch, tmp_path):
    monkeypatch.setattr(local, "discover_gpus", lambda: [])
    cfg = FleetConfig(replicas=2, gpus="none", state_dir=tmp_path)
    specs = plan_replicas(cfg, "/m", local.LocalBackend())
    assert specs[0].cache_dir != specs[1].cache_dir  # they start together: no two compile into one cache
