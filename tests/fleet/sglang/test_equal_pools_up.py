"""`up` and a restart give the replicas of one GPU equal KV pools, through the real launcher (issue 41).

SGLang has no CPU build: each replica is the named stand-in server (standin_server.py), started by
fleetgen's real launcher with SGLang's real command line, which sizes its KV pool from a pretend GPU
(pretend_gpu.py: SGLang 0.5.12's sizing, the H100's numbers) and holds that memory until it dies.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from pretend_gpu import H100, PretendGpu, free_of, locked, write
from real_fleet import free_port_base

from fleetgen.fleet import down, launcher, local, read_state
from fleetgen.fleet import equal_memory as equal_memory_module
from fleetgen.fleet.config import FleetConfig
from fleetgen.fleet.engines import ReplicaSpec
from fleetgen.fleet.engines.base import flag_value
from fleetgen.fleet.engines.sglang import SglangEngine
from fleetgen.fleet.process import is_alive
from fleetgen.gpu_info import GpuInfo

STANDIN = Path(__file__).with_name("standin_server.py")


class StandinOnPretendGpu(SglangEngine):
    """SGLang's engine class with its real argv, run by the stand-in server on the pretend GPU."""

    def __init__(self, gpu_file: Path) -> None:
        self.gpu_file = gpu_file

    def command(self, spec: ReplicaSpec, python: str) -> list[str]:
        return [python, str(STANDIN), *self.server_args(spec), "--standin-gpu", str(self.gpu_file)]

    def validate_commands(self, argvs: list[list[str]], python: str) -> None:
        """SGLang's parser judges these arguments in test_equal_pools.py; the stand-in's own flags would fail it."""


def test_up_and_a_restart_give_eight_replicas_of_one_gpu_equal_pools(monkeypatch, tmp_path):
    gpu_file = tmp_path / "gpu.json"
    write(gpu_file, PretendGpu(**H100))
    engine = StandinOnPretendGpu(gpu_file)
    monkeypatch.setattr(local, "discover_gpus", lambda: [GpuInfo(0, "NVIDIA H100 80GB HBM3", 80 << 30, (9, 0))])
    monkeypatch.setattr(launcher, "get_engine", lambda name: engine)
    monkeypatch.setattr(equal_memory_module, "free_memory", lambda gpus: free_of(gpu_file))  # NVML, on the pretend GPU
    monkeypatch.setenv("FLEETGEN_CACHE", str(tmp_path / "cache"))
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    state_dir = tmp_path / "fleet"
    config = FleetConfig(
        engine="sglang",
        model=str(model),
        gpus="all",
        replicas=8,
        replicas_per_gpu=8,
        engine_args=["--mem-fraction-static", "0.09"],
        port_base=free_port_base(8, 24000),
        state_dir=state_dir,
        doctor=False,
        startup_timeout_s=60,
        stall_timeout_s=60,
    )
    try:
        asyncio.run(launcher.up(config, python=sys.executable))
        state = read_state(state_dir)
        pools = [r.effective_config["max_total_num_tokens"] for r in state.replicas]
        assert len(set(pools)) == 1, pools  # 0.1, 0.111 .. 0.333 gave 243K down to 141K on the H100
        assert [flag_value(r.command, "--max-total-tokens") for r in state.replicas] == [None] + [str(pools[0])] * 7
        assert {(r.gpu_share.kv_tokens, r.gpu_share.static_bytes) for r in state.replicas} == {
            (pools[0], state.replicas[0].gpu_share.static_bytes)
        }

        victim = state.replicas[0]  # the first: it started alone on the GPU, and now finds 7 neighbours
        os.kill(victim.pid, signal.SIGKILL)
        with locked(gpu_file) as gpu:
            gpu.free += gpu.footprint(pools[0])  # the driver gives a dead process's memory back
        new = asyncio.run(launcher.restart_replica(state_dir, 0))
        assert new.pid != victim.pid and is_alive(new.pid, new.create_time, new.boot_time)
        assert new.effective_config["max_total_num_tokens"] == pools[0]
        assert flag_value(new.command, "--max-total-tokens") == str(pools[0])
        assert read_state(state_dir).replicas[0].gpu_share == victim.gpu_share
    finally:
        down(state_dir, grace_s=2)
