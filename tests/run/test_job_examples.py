"""The example job files load, and the seed job's 8 sglang command lines pass SGLang's own parser."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetgen.errors import ConfigError
from fleetgen.fleet import local
from fleetgen.fleet.engines import get_engine
from fleetgen.fleet.replica_plan import plan_replicas
from fleetgen.gpu_info import GpuInfo
from fleetgen.run import load_job

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_quickstart_loads_with_paths_relative_to_the_file():
    job = load_job(EXAMPLES / "quickstart.yaml")
    assert job.fleet.engine == "vllm" and job.fleet.gpus == "none"
    assert all(Path(s.path).exists() for s in job.mix.sources)
    assert job.workdir.is_absolute()


def test_seed_job_loads_and_its_8_command_lines_parse_with_sglang(monkeypatch):
    job = load_job(EXAMPLES / "qwen36-27b-8gpu.yaml")
    assert job.generate.samples == 3 and job.mix.total == 193000
    fake = [GpuInfo(i, "NVIDIA RTX PRO 6000 Blackwell", 96 << 30, (12, 0)) for i in range(8)]
    monkeypatch.setattr(local, "discover_gpus", lambda: fake)
    specs = plan_replicas(job.fleet, job.fleet.model, local.LocalBackend())
    assert [s.gpus for s in specs] == [(i,) for i in range(8)]
    assert len({s.port for s in specs}) == 8
    argvs = [get_engine("sglang").command(s, "python") for s in specs]
    for argv in argvs:
        assert argv[argv.index("--mamba-scheduler-strategy") + 1] == "extra_buffer"
        assert argv[argv.index("--attention-backend") + 1] == "flashinfer"
        assert argv[argv.index("--tool-call-parser") + 1] == "qwen3_coder"

    from fleetgen.fleet.engines.sglang_validate import DEFAULT_PYTHON, check_command_lines

    if not DEFAULT_PYTHON.exists():
        pytest.skip("SGLang's parser is not installed (.venv-sglang): run scripts/setup-sglang.sh")
    verdicts = check_command_lines(argvs)
    assert verdicts.version == "0.5.12"
    assert [r.error for r in verdicts.results if not r.ok] == []


def test_a_job_with_neither_fleet_nor_endpoints_is_refused(tmp_path):
    bad = tmp_path / "job.yaml"
    bad.write_text("generate: {prompts: p.jsonl}\n")
    with pytest.raises(ConfigError, match="fleet section or generate.endpoints"):
        load_job(bad)


def test_unknown_section_is_named(tmp_path):
    bad = tmp_path / "job.yaml"
    bad.write_text("generate: {prompts: p.jsonl, endpoints: ['http://127.0.0.1:1']}\ngenrate: {}\n")
    with pytest.raises(ConfigError, match="genrate"):
        load_job(bad)


def test_a_job_file_carries_sampling_profiles_to_generate(tmp_path):
    from fleetgen.generate import GenerateConfig

    job_file = tmp_path / "job.yaml"
    job_file.write_text(
        "generate:\n  prompts: p.jsonl\n  endpoints: ['http://127.0.0.1:1']\n  seed: 0\n  profiles:\n"
        "    - {name: think, weight: 2, thinking: true}\n    - {name: plain, thinking: false, extra_body: {top_k: 5}}\n"
    )
    with pytest.raises(ConfigError, match="extra_body may not set top_k"):
        load_job(job_file)
    job_file.write_text(job_file.read_text().replace("extra_body: {top_k: 5}", "top_k: 5"))
    section = load_job(job_file).generate
    config = GenerateConfig.model_validate(
        {**section.model_dump(exclude={"prompts", "output_dir"}), "prompts": "p.jsonl", "output_dir": tmp_path / "out"}
    )
    assert [(p.name, p.weight, p.thinking, p.top_k) for p in config.sampling.profiles] == [
        ("think", 2.0, True, None),
        ("plain", 1.0, False, 5),
    ]
    assert [p["name"] for p in config.sampling.identity()["profiles"]] == ["think", "plain"]


def test_the_capture_example_is_the_quickstart_plus_a_capture_stage_and_plans_its_storage():
    from typer.testing import CliRunner

    from fleetgen.cli.app import app

    quick, cap = load_job(EXAMPLES / "quickstart.yaml"), load_job(EXAMPLES / "capture.yaml")
    same = {"capture", "workdir"}
    assert cap.model_dump(exclude=same) == quick.model_dump(exclude=same)  # the quickstart's job, as it is
    assert cap.workdir != quick.workdir and quick.capture is None
    assert (cap.capture.layers, cap.capture.dtype, cap.capture.backend) == ("eagle3", "bf16", "vllm")
    assert cap.fleet.gpus == "none"  # the CPU default
    res = CliRunner().invoke(
        app, ["plan", str(EXAMPLES / "capture.yaml"), "--hidden-size", "576", "--num-layers", "30"]
    )  # SmolLM2's shape, so the test needs no prepared model
    assert res.exit_code == 0, res.output
    chosen = [line for line in res.output.splitlines() if "<- the job's capture" in line]
    assert len(chosen) == 1 and chosen[0].split()[:4] == ["eagle3", "bf16", "layers", "2,15,27,30"]
    assert "4,616 B" in chosen[0]  # 4 layers x 576 x 2 + the 8-byte id
