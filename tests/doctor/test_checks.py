"""The H200 as it really is, torch/driver checks, memory plan, hybrid flags, the report contract and the CLI."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import typer
from doctor_fakes import FIXTURES, FakeMachine, h200_nvml
from typer.testing import CliRunner

import fleetgen.doctor
from fleetgen.cli.doctor import register
from fleetgen.doctor import DoctorReport, Status
from fleetgen.doctor.attention import check_hybrid
from fleetgen.doctor.gpus import NvmlSnapshot
from fleetgen.doctor.memory import check_memory
from fleetgen.doctor.modelinfo import read_model

DOCS = Path(__file__).parents[2] / "docs"


def test_h200_layout_from_fixtures_is_all_ok(machine: FakeMachine):
    """The real H200 (sm_90, CUDA 13.0 toolkit, torch 2.11+cu130) rebuilt from its listings: nothing to fix."""
    machine.nvml = h200_nvml()
    home = machine.system_toolkit(machine.root / "usr-local-cuda")
    machine.env |= {
        "CUDA_HOME": str(home),
        "PATH": f"{home / 'bin'}:{machine.root / 'venv-bin'}:{machine.env['PATH']}",
        "LD_LIBRARY_PATH": str(machine.cu13 / "lib"),
    }
    report = machine.doctor()
    assert [c.id for c in report.checks if c.status not in (Status.OK, Status.SKIP)] == []
    assert "1 x NVIDIA H200 (sm_90), driver 580.159.04 (CUDA 13.0)" == report.get("gpu.devices").summary
    assert report.get("toolchain.nvcc").summary.startswith("nvcc 13.0")
    assert report.overlay is None


def test_recorded_h200_report_still_parses():
    """The JSON the doctor printed on the real H200 validates against today's schema."""
    report = DoctorReport.model_validate_json((FIXTURES / "h200-doctor-sglang.json").read_text())
    assert report.get("kernels.sglang").cause == "engine_not_installed"
    assert report.get("gpu.devices").evidence["gpus"][0]["compute_capability"] == "9.0"


def test_torch_built_for_newer_cuda_than_the_driver(machine: FakeMachine):
    machine.nvml = NvmlSnapshot(gpus=machine.nvml.gpus, driver_version="570.86", cuda_driver=(12, 8))
    c = machine.doctor().get("torch.cuda")
    assert c.status is Status.FAIL and c.cause == "driver_too_old" and "CUDA 13.0" in c.summary and "12.8" in c.summary


def test_torch_without_sm120_build(machine: FakeMachine):
    machine.fake_torch(version="2.6.0+cu124", cuda="12.4", arch_list=("sm_50", "sm_80", "sm_86", "sm_90"))
    c = machine.doctor().get("torch.cuda")
    assert c.cause == "torch_arch_unsupported" and "sm_120" in c.summary


def test_torch_cpu_build_on_a_gpu_machine(machine: FakeMachine):
    machine.fake_torch(version="2.11.0+cpu", cuda=None)
    assert machine.doctor().get("torch.cuda").cause == "torch_cpu_build"


def test_no_gpu_is_a_clean_skip(machine: FakeMachine):
    machine.nvml = NvmlSnapshot(error="NVML did not start: NVML Shared Library Not Found")
    report = machine.doctor(engine="vllm")
    assert report.get("gpu.devices").status is Status.SKIP and "CPU engine" in report.get("gpu.devices").summary
    assert report.get("toolchain.cuda_home").status is Status.SKIP
    assert report.get("attention.backend").status is Status.SKIP


def _model(tmp_path: Path, weights: int, **cfg) -> Path:
    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    with open(d / "model.safetensors", "wb") as f:
        f.truncate(weights)  # sparse: the size is what counts
    return d


HYBRID = dict(
    model_type="qwen3_next",
    hidden_size=5120,
    num_hidden_layers=64,
    num_attention_heads=24,
    num_key_value_heads=4,
    head_dim=256,
    full_attention_interval=4,
    max_position_embeddings=262144,
    torch_dtype="bfloat16",
)


def test_memory_plan_matches_hand_arithmetic(tmp_path):
    model = read_model(_model(tmp_path, 54 * 10**9, **HYBRID))
    assert model.attention_layers == 16 and model.kv_bytes_per_token == 2 * 16 * 4 * 256 * 2
    c = check_memory(model, h200_nvml(), tp=1, mem_fraction=0.85, max_running_requests=128, context_length=32768)
    room = 150754820096 * 0.85 - 54 * 10**9
    assert c.evidence["kv_tokens"] == int(room // 65536)
    assert (
        c.status is Status.WARN and c.cause == "kv_cache_too_small" and "only 34 full-length requests fit" in c.summary
    )
    ok = check_memory(model, h200_nvml(), tp=1, mem_fraction=0.85, max_running_requests=32, context_length=32768)
    assert ok.status is Status.OK


def test_weights_larger_than_the_gpu(tmp_path):
    model = read_model(_model(tmp_path, 200 * 10**9, **HYBRID))
    assert (
        check_memory(model, h200_nvml(), tp=1, mem_fraction=0.9, max_running_requests=None, context_length=None).cause
        == "weights_do_not_fit"
    )


def test_hybrid_flags_from_config(tmp_path):
    model = read_model(_model(tmp_path, 1, **HYBRID))
    c = check_hybrid("sglang", model, [])
    assert c.fix.engine_args == ["--mamba-ssm-dtype", "float32", "--mamba-scheduler-strategy", "extra_buffer"]
    assert check_hybrid("sglang", model, c.fix.engine_args).status is Status.OK
    assert check_hybrid("vllm", model, []).fix.engine_args == ["--mamba-ssm-cache-dtype", "float32"]
    (tmp_path / "d").mkdir()
    dense = read_model(_model(tmp_path / "d", 1, model_type="llama", num_hidden_layers=32))
    assert check_hybrid("sglang", dense, []) is None


def test_exports():
    assert sorted(fleetgen.doctor.__all__) == sorted(
        [
            "SCHEMA_VERSION",
            "Check",
            "DoctorConfig",
            "DoctorReport",
            "Fix",
            "FixResult",
            "Host",
            "OverlayPlan",
            "Status",
            "engine_args_for_replicas",
            "env_for_replicas",
            "run_doctor",
            "write_fix",
        ]
    )
    for name in fleetgen.doctor.__all__:
        assert getattr(fleetgen.doctor, name) is not None


def test_json_schema_is_the_documented_one():
    """Changing the report's shape must change docs/doctor.schema.json (and SCHEMA_VERSION when it breaks)."""
    documented = json.loads((DOCS / "doctor.schema.json").read_text())
    assert DoctorReport.model_json_schema() == documented


def test_cli_json_on_a_machine_without_gpu(monkeypatch):
    """This machine has no GPU: the real CLI, real NVML and real torch subprocess say so and exit 0."""
    app = typer.Typer()
    app.callback()(lambda: None)
    register(app)
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    res = CliRunner().invoke(app, ["doctor", "--json"])
    report = DoctorReport.model_validate_json(res.stdout)
    if report.get("gpu.devices").status is not Status.SKIP:
        return  # run on a GPU machine: covered by the fake-machine tests
    assert res.exit_code == 0, res.output
    assert report.get("gpu.devices").cause == "no_gpu"
    assert report.get("toolchain.cuda_home").status is Status.SKIP
