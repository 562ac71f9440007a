"""Replicas sharing a GPU get equal KV pools (issue 41), checked against what the H100 and H200 reported.

SGLang's memory sizing runs here as a pretend GPU (pretend_gpu.py); the tests first show that it
reproduces the pools the GPUs reported with fleetgen's old fractions, then drive fleetgen's real
planner, command builder and equal_memory.EqualMemory through it, as `up` does.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
from pretend_gpu import GIB, H100, H200, PretendGpu

from fleetgen.fleet import local
from fleetgen.fleet.config import FleetConfig
from fleetgen.fleet.engines import get_engine
from fleetgen.fleet.engines.base import flag_value
from fleetgen.fleet.engines.memory_share import EqualShare
from fleetgen.fleet.engines.sglang import shared_fraction
from fleetgen.fleet.equal_memory import EqualMemory
from fleetgen.fleet.replica_plan import plan_replicas
from fleetgen.fleet.state import ReplicaState
from fleetgen.gpu_info import GpuInfo

FIXTURES = Path(__file__).with_name("fixtures")
ENGINE = get_engine("sglang")


def h100_notes() -> tuple[list[int], list[float]]:
    text = (FIXTURES / "h100-up8-notes.log").read_text()
    pools = [int(n) for n in re.findall(r"replica \d+=(\d+)", text.splitlines()[2])]
    fractions = [float(f) for f in re.findall(r"replica \d+=([0-9.]+)", text.splitlines()[3])]
    return pools, fractions


def test_the_pretend_gpu_gives_the_pools_the_h100_reported_with_the_old_fractions():
    pools, fractions = h100_notes()
    assert len(pools) == 8 and fractions[0] == 0.1 and fractions[-1] == 0.333
    gpu = PretendGpu(**H100)
    got = [gpu.start(f) for f in fractions]
    assert got == pytest.approx(pools, rel=2e-3)  # 243383 down to 141378


def test_the_pretend_gpu_gives_the_pools_the_h200_logged():
    # Each replica's log: the memory it found free, its weights and its KV pool (fixtures/h200-replica-*.log).
    for index, fraction in ((0, shared_fraction(0.8, 0, 2)), (1, shared_fraction(0.8, 1, 2))):
        log = (FIXTURES / f"h200-replica-{index}.log").read_text()
        pre = float(re.search(r"Load weight begin\. avail mem=([0-9.]+) GB", log)[1]) * GIB
        weights = float(re.search(r"Load weight end\..* mem usage=([0-9.]+) GB", log)[1]) * GIB
        tokens = int(re.search(r"KV Cache is allocated\. #tokens: (\d+)", log)[1])
        gpu = PretendGpu(**{**H200, "free": int(pre + H200["context"]), "weights": int(weights)})
        assert gpu.start(fraction) == pytest.approx(tokens, rel=5e-3)


def plan(monkeypatch, tmp_path, fraction: float | None, replicas: int, name: str = "NVIDIA H100 80GB HBM3"):
    monkeypatch.setattr(local, "discover_gpus", lambda: [GpuInfo(0, name, 80 << 30, (9, 0))])
    monkeypatch.setenv("FLEETGEN_CACHE", str(tmp_path / "cache"))
    args = ["--mem-fraction-static", str(fraction)] if fraction is not None else []
    cfg = FleetConfig(
        engine="sglang",
        model="/models/m",
        gpus="all",
        replicas=replicas,
        replicas_per_gpu=replicas,
        engine_args=args,
        state_dir=tmp_path / "state",
    )
    return plan_replicas(cfg, "/models/m", local.LocalBackend())


def up_on(gpu: PretendGpu, specs, equal: EqualMemory | None = None):
    """What `up` does with each replica of one GPU, one after another (launcher._start), on the pretend GPU."""
    equal = equal or EqualMemory(ENGINE, measure=lambda gpus: gpu.free)
    replicas, commands = [], []
    for spec in specs:
        spec = equal.before_start(spec)
        argv = ENGINE.command(spec, "python")
        cap = flag_value(argv, "--max-total-tokens")
        tokens = gpu.start(float(flag_value(argv, "--mem-fraction-static")), int(cap) if cap else None)
        replica = ReplicaState(
            index=spec.index,
            endpoint=f"http://127.0.0.1:{spec.port}",
            pid=1,
            create_time=0.0,
            engine="sglang",
            model="/models/m",
            served_model_name="m",
            log_path="x",
            command=argv,
            gpus=list(spec.gpus),
        )
        replica.effective_config = {"max_total_num_tokens": tokens}
        equal.after_ready(spec, replica, replica.effective_config)
        replicas.append(replica)
        commands.append(argv)
    equal.finish(replicas)
    return [r.effective_config["max_total_num_tokens"] for r in replicas], commands, replicas


def test_two_replicas_on_the_h200_get_the_first_ones_pool(monkeypatch, tmp_path, caplog):
    gpu = PretendGpu(**H200)
    with caplog.at_level(logging.INFO, logger="fleetgen"):
        pools, commands, replicas = up_on(gpu, plan(monkeypatch, tmp_path, None, 2, "NVIDIA H200"))
    assert pools[0] == pools[1] == pytest.approx(1810423, rel=5e-3)  # the first one's, as the H200 logged it
    assert flag_value(commands[0], "--max-total-tokens") is None
    assert flag_value(commands[1], "--max-total-tokens") == str(pools[0])
    assert "each is given replica 0's 55.9 GiB for weights and KV pool, and its pool of" in caplog.text
    assert "WARNING" not in caplog.text
    assert all(r.gpu_share is not None and r.gpu_share.kv_tokens == pools[0] for r in replicas)


def test_eight_replicas_at_0_1_on_the_h100_cannot_all_hold_the_first_ones_pool_and_up_says_what_would(
    monkeypatch, tmp_path, caplog
):
    gpu = PretendGpu(**H100)
    with caplog.at_level(logging.WARNING, logger="fleetgen"):
        pools, commands, _ = up_on(gpu, plan(monkeypatch, tmp_path, 0.1, 8))
    assert pools[0] == pytest.approx(243383, rel=2e-3)
    assert len(set(pools[1:])) == 1 and pools[1] < pools[0]  # the other 7 equal, where they were 234663 .. 141378
    assert gpu.free >= GIB  # and they fit
    assert [flag_value(c, "--max-total-tokens") for c in commands] == [None, None] + [str(pools[1])] * 6
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1, warnings  # one line: what each gets, why, and what would make them equal
    assert warnings[0].startswith(
        f"replicas sharing GPU 0: replica 0 keeps its KV pool of {pools[0]} tokens; the other 7 "
        "get 7.1 GiB each for weights and KV pool, equal among them but less than its 7.8 GiB: "
        "8 x (7.8 GiB + the 2.3 GiB each holds beyond it) is more than the 78.4 GiB free"
    )
    most = re.search(r"for equal pools pass --mem-fraction-static ([0-9.]+) or fewer --replicas-per-gpu$", warnings[0])
    assert most, warnings[0]

    # What `up` said to pass gives 8 equal pools on the same GPU.
    caplog.clear()
    gpu = PretendGpu(**H100)
    with caplog.at_level(logging.WARNING, logger="fleetgen"):
        pools, commands, _ = up_on(gpu, plan(monkeypatch, tmp_path, float(most[1]), 8))
    assert len(set(pools)) == 1 and not caplog.records, caplog.text
    assert gpu.free >= GIB
    assert all(flag_value(c, "--max-total-tokens") == str(pools[0]) for c in commands[1:])


def test_a_restarted_replica_gets_the_pool_of_the_others(monkeypatch, tmp_path):
    from fleetgen.fleet.state import FleetState

    gpu = PretendGpu(**H100)
    specs = plan(monkeypatch, tmp_path, 0.09, 8)
    pools, _, replicas = up_on(gpu, specs)
    assert len(set(pools)) == 1
    state = FleetState(engine="sglang", model="/models/m", served_model_name="m", replicas=replicas)
    for index in (0, 5):  # the first replica, which started alone on the GPU, and a later one
        gpu.free += gpu.footprint(pools[index])  # killed: the driver gives its memory back
        equal = EqualMemory.of_fleet(ENGINE, state, measure=lambda gpus: gpu.free)
        spec = equal.before_start(specs[index])
        argv = ENGINE.command(spec, "python")
        assert (
            gpu.start(float(flag_value(argv, "--mem-fraction-static")), int(flag_value(argv, "--max-total-tokens")))
            == pools[0]
        )


def test_without_nvml_the_old_fractions_stand_and_up_says_why_in_one_line(monkeypatch, tmp_path, caplog):
    specs = plan(monkeypatch, tmp_path, 0.1, 8)
    equal = EqualMemory(ENGINE, measure=lambda gpus: None)
    with caplog.at_level(logging.WARNING, logger="fleetgen"):
        _, commands, _ = up_on(PretendGpu(**H100), specs, equal)
    assert [flag_value(c, "--mem-fraction-static") for c in commands] == [str(f) for f in h100_notes()[1]]
    assert all(flag_value(c, "--max-total-tokens") is None for c in commands)
    said = [r.getMessage() for r in caplog.records]
    assert said[0] == (
        "replicas sharing GPU 0 may get unequal KV pools (fractions from their places, not measured "
        "bytes): the free memory of GPU 0 cannot be read (NVML)"
    )
    assert len(said) == 1


def test_a_given_cap_is_replaced_by_the_first_ones_pool_which_is_within_it(monkeypatch, tmp_path):
    specs = plan(monkeypatch, tmp_path, 0.09, 8)
    specs = [
        s.__class__(**{**s.__dict__, "extra_args": (*s.extra_args, "--max-total-tokens", "200000")}) for s in specs
    ]
    pools, commands, _ = up_on(PretendGpu(**H100), specs)
    assert set(pools) == {200000}
    assert all(c.count("--max-total-tokens") == 1 for c in commands)


def test_the_fraction_holds_the_bytes_erring_up_under_a_cap_and_down_without():
    assert EqualShare(static_bytes=8 * GIB, kv_tokens=1, free_bytes=41 * GIB).fraction() == 0.2  # 8 of the 40 GiB left
    assert EqualShare(8 * GIB, 1, 30 * GIB).fraction() == 0.2759  # 8/29 = 0.275862..: the cap binds
    assert EqualShare(8 * GIB, None, 30 * GIB).fraction() == 0.2758  # its pool becomes the others' cap
    assert EqualShare(8 * GIB, 1, 8 * GIB).fraction() is None  # no room left beside it


def test_pools_that_come_out_unequal_unforeseen_are_named(monkeypatch, tmp_path, caplog):
    # A replica's own start takes far more than fleetgen reserves for it (3 GiB, not 1): the later ones find less
    # than the first's bytes and SGLang keeps their smaller profiled pools. Nothing foresaw it, so the end says so.
    gpu = PretendGpu(**{**H200, "context": 3 * GIB, "beyond": int(3.5 * GIB)})
    with caplog.at_level(logging.WARNING, logger="fleetgen"):
        pools, _, _ = up_on(gpu, plan(monkeypatch, tmp_path, None, 4, "NVIDIA H200"))
    assert pools[-1] < pools[0]
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and said[0].startswith(
        f"replicas sharing GPU 0 have unequal KV pools (replica 0: {pools[0]}, "
    )
    assert "'max_total_tokens=... is larger than the profiled value'" in said[0]


def test_the_commands_of_equal_pools_parse_with_sglangs_own_parser(monkeypatch, tmp_path):
    from fleetgen.errors import EngineError
    from fleetgen.fleet.engines.sglang_validate import check_command_lines, sglang_python

    try:
        sglang_python()
    except EngineError as e:
        pytest.skip(f"{e} (run scripts/setup-sglang.sh)")
    _, first, _ = up_on(PretendGpu(**H100), plan(monkeypatch, tmp_path, 0.1, 8))  # the 7 reduced, 6 of them capped
    _, equal, _ = up_on(PretendGpu(**H100), plan(monkeypatch, tmp_path, 0.09, 8))
    verdicts = check_command_lines(first + equal)
    assert verdicts.version == "0.5.12"
    assert [r.error for r in verdicts.results if not r.ok] == []
    assert all(not r.deprecated for r in verdicts.results)
