"""`up` runs the doctor first on GPUs and refuses to launch into a broken environment."""

from __future__ import annotations

import pytest

from fleetgen.errors import FleetError
from fleetgen.fleet.config import FleetConfig
from fleetgen.fleet.engines import ReplicaSpec
from fleetgen.fleet.launcher import replica_env
from fleetgen.fleet.local import LocalBackend

GPU_SPEC = ReplicaSpec(index=0, model="/m", served_model_name="m", host="127.0.0.1", port=30000, gpus=(0,))


def test_up_refuses_when_the_engine_kernels_are_missing(tmp_path):
    # This interpreter has no sglang: the doctor's kernels check fails, so nothing may launch.
    cfg = FleetConfig(engine="sglang", state_dir=tmp_path)
    with pytest.raises(FleetError) as info:
        LocalBackend().preflight(cfg, [GPU_SPEC], python="python3")
    assert "kernels.sglang" in info.value.message
    assert "--no-doctor" in info.value.hint


def test_no_doctor_launches_anyway_and_env_is_passed(tmp_path):
    cfg = FleetConfig(engine="sglang", state_dir=tmp_path, doctor=False, env={"FOO": "1"})
    LocalBackend().preflight(cfg, [GPU_SPEC], python="python3")
    assert replica_env(cfg) == {"FOO": "1"}


def test_cpu_replicas_skip_the_gpu_doctor(tmp_path):
    cpu_spec = ReplicaSpec(index=0, model="/m", served_model_name="m", host="127.0.0.1", port=30000)
    cfg = FleetConfig(engine="sglang", state_dir=tmp_path)
    LocalBackend().preflight(cfg, [cpu_spec], python="python3")
    assert replica_env(cfg) == {}
