"""Several replicas on one GPU (`replicas_per_gpu`): placement, start order and each one's memory share.

On the H200 two SGLang replicas of a small Qwen3 shared the one GPU this way (BENCHMARKS.md).
"""

from __future__ import annotations

import logging

import pytest
from pydantic import ValidationError

from fleetgen.errors import ConfigError
from fleetgen.fleet import local, verify
from fleetgen.fleet.config import FleetConfig
from fleetgen.fleet.devices import gpu_groups, sharing_waves
from fleetgen.fleet.engines import get_engine
from fleetgen.fleet.engines.base import flag_value, without_flag
from fleetgen.fleet.engines.sglang import shared_fraction
from fleetgen.fleet.replica_plan import plan_replicas
from fleetgen.gpu_info import GpuInfo


def test_groups_serve_several_replicas_round_robin():
    assert gpu_groups("all", 1, None, [0, 1], per_group=2) == [(0,), (1,), (0,), (1,)]
    assert gpu_groups("all", 1, 3, [0, 1], per_group=2) == [(0,), (1,), (0,)]
    assert gpu_groups("all", 1, 2, [0], per_group=2) == [(0,), (0,)]
    with pytest.raises(ConfigError, match="replicas-per-gpu 2"):
        gpu_groups("all", 1, 3, [0], per_group=2)
    with pytest.raises(ConfigError):
        gpu_groups("all", 1, 2, [0])  # one replica per GPU unless asked


def test_replicas_of_one_gpu_start_one_after_another():
    assert sharing_waves([0, 0, 1, 1]) == [[0, 1], [2, 3]]
    assert sharing_waves([0, 1, 0, 1]) == [[0, 2], [1, 3]]
    assert sharing_waves([0, 0]) == [[0, 1]]
    assert sharing_waves([]) == []


def test_each_replica_gets_an_equal_share_of_the_whole_gpu():
    # SGLang's fraction is of the memory free at its start: replica k finds k shares taken.
    for n in (2, 3, 4):
        free = 1.0
        for k in range(n):
            f = shared_fraction(0.8, k, n)
            assert f * free == pytest.approx(0.8 / n, abs=2e-3)
            free -= f * free


def _plan(monkeypatch, tmp_path, engine: str, args: list[str], gpus: int = 1, replicas: int = 2, per_gpu: int = 2):
    fake = [GpuInfo(i, "NVIDIA H200", 141 << 30, (9, 0)) for i in range(gpus)]
    monkeypatch.setattr(local, "discover_gpus", lambda: fake)
    cfg = FleetConfig(
        engine=engine,
        model="/models/m",
        gpus="all",
        replicas=replicas,
        replicas_per_gpu=per_gpu,
        engine_args=args,
        state_dir=tmp_path,
    )
    specs = plan_replicas(cfg, "/models/m", local.LocalBackend())
    return specs, [get_engine(engine).command(s, "python") for s in specs]


def test_sglang_replicas_sharing_a_gpu_get_their_own_memory_fraction(monkeypatch, tmp_path):
    specs, cmds = _plan(monkeypatch, tmp_path, "sglang", ["--attention-backend", "flashinfer"])
    assert [s.gpus for s in specs] == [(0,), (0,)]
    assert [(s.gpu_slot, s.gpu_sharers) for s in specs] == [(0, 2), (1, 2)]
    assert [s.port for s in specs] == [30000, 30001]
    assert [flag_value(c, "--mem-fraction-static") for c in cmds] == ["0.4", "0.667"]
    for c in cmds:
        assert c.count("--mem-fraction-static") == 1


def test_a_given_mem_fraction_is_each_replicas_share_of_the_gpu(monkeypatch, tmp_path):
    # Each replica takes 0.3 of the whole GPU, as asked: replica 1 finds 0.7 free, and 0.3 of the GPU is 0.429 of that.
    _, cmds = _plan(monkeypatch, tmp_path, "sglang", ["--mem-fraction-static=0.3", "--dtype", "bfloat16"])
    assert [flag_value(c, "--mem-fraction-static") for c in cmds] == ["0.3", "0.429"]
    assert all("--mem-fraction-static=0.3" not in c and c[-2:] == ["--dtype", "bfloat16"] for c in cmds)


def test_eight_replicas_on_one_gpu_keep_a_given_fraction_that_fits(monkeypatch, tmp_path):
    _, cmds = _plan(monkeypatch, tmp_path, "sglang", ["--mem-fraction-static", "0.11"], replicas=8, per_gpu=8)
    free, held = 1.0, []
    for c in cmds:
        f = float(flag_value(c, "--mem-fraction-static"))
        held.append(f * free)
        free -= f * free
    assert held == pytest.approx([0.11] * 8, abs=2e-3)  # the user's 0.11 each, not a split of it


@pytest.mark.parametrize(
    ("engine", "flag", "value", "replicas", "total", "most"),
    [
        ("sglang", "--mem-fraction-static", "0.5", 8, "4.00", "0.11"),
        ("sglang", "--mem-fraction-static", "0.5", 2, "1.00", "0.45"),
        ("vllm", "--gpu-memory-utilization", "0.3", 4, "1.20", "0.22"),
    ],
)
def test_a_given_fraction_that_does_not_fit_is_refused_naming_the_flag(
    monkeypatch, tmp_path, engine, flag, value, replicas, total, most
):
    with pytest.raises(ConfigError) as e:
        _plan(monkeypatch, tmp_path, engine, [flag, value], replicas=replicas, per_gpu=replicas)
    assert e.value.message.startswith(f"{replicas} replicas share GPU 0 at {flag} {value} each = {total} of the GPU")
    assert f"pass at most {flag} {most} with {replicas} replicas per GPU, or fewer replicas" in e.value.hint


def test_a_given_fraction_that_is_not_a_fraction_is_refused(monkeypatch, tmp_path):
    with pytest.raises(ConfigError, match="--mem-fraction-static 'half' is not a number"):
        _plan(monkeypatch, tmp_path, "sglang", ["--mem-fraction-static", "half"])


def test_one_replica_per_gpu_leaves_the_flag_alone(monkeypatch, tmp_path):
    specs, cmds = _plan(monkeypatch, tmp_path, "sglang", ["--mem-fraction-static", "0.5"], gpus=2)
    assert [(s.gpus, s.gpu_sharers) for s in specs] == [((0,), 1), ((1,), 1)]
    assert [flag_value(c, "--mem-fraction-static") for c in cmds] == ["0.5", "0.5"]


def test_vllm_replicas_sharing_a_gpu_split_its_utilization(monkeypatch, tmp_path):
    _, cmds = _plan(monkeypatch, tmp_path, "vllm", [])
    assert [flag_value(c, "--gpu-memory-utilization") for c in cmds] == ["0.45", "0.45"]


def test_vllm_keeps_a_given_utilization_that_fits(monkeypatch, tmp_path):
    _, cmds = _plan(monkeypatch, tmp_path, "vllm", ["--gpu-memory-utilization", "0.4"])
    assert [flag_value(c, "--gpu-memory-utilization") for c in cmds] == ["0.4", "0.4"]
    assert all(c.count("--gpu-memory-utilization") == 1 for c in cmds)


def test_sharing_is_refused_where_it_cannot_apply(tmp_path):
    with pytest.raises(ValidationError, match="local fleets"):
        FleetConfig(engine="sglang", replicas_per_gpu=2, ray="auto", state_dir=tmp_path)
    with pytest.raises(ValidationError, match="needs GPUs"):
        FleetConfig(replicas_per_gpu=2, gpus="none", state_dir=tmp_path)


def test_flag_helpers():
    assert flag_value(["--a", "1", "--a=2"], "--a") == "2"
    assert flag_value(["--ab", "1"], "--a") is None
    assert without_flag(["--a", "1", "--b", "--a=2", "--ab", "3"], "--a") == ["--b", "--ab", "3"]


def test_memory_shares_differ_softly_only_where_replicas_share_a_gpu(caplog):
    from fleetgen.errors import ConfigMismatchError
    from fleetgen.fleet.state import ReplicaState

    # What the two H200 replicas reported: 0.4 and 0.667 of the memory each found free.
    configs = [
        {"mem_fraction_static": 0.4, "max_total_num_tokens": 1810423},
        {"mem_fraction_static": 0.667, "max_total_num_tokens": 1769572},
    ]
    replicas = [
        ReplicaState(
            index=i,
            endpoint=f"http://127.0.0.1:{30000 + i}",
            pid=1,
            create_time=0.0,
            engine="sglang",
            model="m",
            served_model_name="m",
            log_path="x",
            command=[],
        )
        for i in range(2)
    ]
    with caplog.at_level(logging.INFO, logger="fleetgen"):
        verify.record_configs(replicas, configs, verify.SOFT_CONFIG_FIELDS | verify.SHARING_SOFT_FIELDS)
    assert "mem_fraction_static" in caplog.text
    with pytest.raises(ConfigMismatchError, match="mem_fraction_static"):
        verify.record_configs(replicas, configs)
