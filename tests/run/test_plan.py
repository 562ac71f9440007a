"""`fleetgen plan`: wall time and GPU-hours from a measured throughput."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from fleetgen.cli.app import app
from fleetgen.errors import ConfigError
from fleetgen.generate.observe.stats import Stats
from fleetgen.run import load_job
from fleetgen.run.job_plan import plan_job, read_warmup


def _job(tmp_path: Path, rows: int = 1000, fleet: str = "") -> Path:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_bytes(
        b"".join(
            orjson.dumps({"id": f"p{i}", "messages": [{"role": "user", "content": "hi"}]}) + b"\n" for i in range(rows)
        )
        + b"\n"
    )  # a blank last line is not a row
    job = tmp_path / "job.yaml"
    gen = "generate:\n  prompts: prompts.jsonl\n  samples: 3\n  max_tokens: 4096\n"
    job.write_text(gen + (fleet or "  endpoints: [http://127.0.0.1:30000]\n"))
    return job


def test_plan_scales_the_measured_rate_to_the_jobs_gpus(tmp_path):
    job = load_job(_job(tmp_path, fleet="fleet:\n  model: m\n  replicas: 4\n  tp: 2\n"))
    plan = plan_job(job, tokens_per_s=1000, tokens_per_sample=600, warmup_gpus=2)
    assert (plan.rows, plan.pairs, plan.gpus) == (1000, 3000, 8)
    assert plan.tokens_per_s == pytest.approx(4000)  # 1000 tok/s on 2 GPUs -> 4000 on 8
    assert plan.wall_s == pytest.approx(3000 * 600 / 4000)
    assert plan.gpu_hours == pytest.approx(plan.wall_s / 3600 * 8)
    assert not plan.tokens_assumed


def test_without_a_token_measure_the_plan_uses_max_tokens_and_says_so(tmp_path):
    plan = plan_job(load_job(_job(tmp_path)), tokens_per_s=500, gpus=1)
    assert plan.tokens_per_sample == 4096 and plan.tokens_assumed


def test_endpoints_only_job_needs_gpus(tmp_path):
    with pytest.raises(ConfigError, match="GPUs"):
        plan_job(load_job(_job(tmp_path)), tokens_per_s=500)


def test_warmup_stats_give_rate_and_tokens_per_sample(tmp_path):
    clock = iter([0.0, 100.0])
    stats = Stats(clock=lambda: next(clock), ok=50, completion_tokens=25_000)
    stats.finished = 100.0
    path = tmp_path / "stats.json"
    path.write_bytes(orjson.dumps(stats.to_dict()))
    warm = read_warmup(path)
    assert warm.tokens_per_s == pytest.approx(250)
    assert warm.tokens_per_sample == pytest.approx(500)


def test_cli_plans_from_a_warmup_and_refuses_without_a_rate(tmp_path):
    job = _job(tmp_path, rows=200)
    stats = tmp_path / "stats.json"
    stats.write_bytes(orjson.dumps({"output_tokens_per_s": 100.0, "rows": {"ok": 10}, "tokens": {"completion": 3000}}))
    ok = CliRunner().invoke(app, ["plan", str(job), "--from-stats", str(stats), "--gpus", "2"])
    assert ok.exit_code == 0, ok.output
    assert "200 x 3 = 600" in ok.output and "180,000" in ok.output  # 600 pairs x 300 tokens
    assert "0.5 h" in ok.output  # 180,000 tokens at 100 tok/s
    bad = CliRunner().invoke(app, ["plan", str(job), "--gpus", "2"])
    assert bad.exit_code != 0


def _qwen36_like(tmp_path: Path) -> Path:
    """A local checkpoint folder whose config nests its text model, as Qwen3.6-27B's does (hybrid, 64 x 5120)."""
    model = tmp_path / "Qwen3.6-27B"
    model.mkdir()
    layer_types = ["linear_attention", "linear_attention", "linear_attention", "full_attention"] * 16
    text = {"model_type": "qwen3_5_text", "hidden_size": 5120, "num_hidden_layers": 64, "layer_types": layer_types}
    config = {"model_type": "qwen3_5", "architectures": ["Qwen3_5ForConditionalGeneration"], "text_config": text}
    (model / "config.json").write_bytes(orjson.dumps(config))
    return model


def test_plan_prints_the_seed_jobs_capture_storage_per_preset_and_dtype(tmp_path):
    # the seed's job: 193,000 prompts x 3 samples, ~1.5K tokens each, on Qwen3.6-27B (read from its config.json)
    model = _qwen36_like(tmp_path)
    job = Path(__file__).parents[2] / "examples" / "qwen36-27b-8gpu.yaml"  # its /models/Qwen3.6-27B is not here
    res = CliRunner().invoke(app, ["plan", str(job), "--tokens-per-sample", "1500", "--model", str(model)])
    assert res.exit_code == 0, res.output
    out = res.output
    assert "64 layers x hidden 5120" in out and "config.json" in out
    assert "868,500,000 (579,000 samples x 1,500 tokens" in out
    lines = {tuple(line.split()[:2]): line for line in out.splitlines() if line.startswith("  ") and "layers" in line}
    # eagle3: [2, 32, 61, 64]; dflash (5 draft layers): outputs of 1,16,31,46,61 (+1) and the last, 64
    assert "layers 2,32,61,64 " in lines[("eagle3", "bf16")] and "layers 2,17,32,47,62,64 " in lines[("dflash", "fp8")]
    assert "40,968 B (40.0 KiB) a token" in lines[("eagle3", "bf16")]  # 4 x 5120 x 2 + the 8-byte id
    assert "20,492 B" in lines[("eagle3", "fp8")]  # 4 x 5120 + id + one float32 scale
    assert "61,448 B" in lines[("dflash", "bf16")] and "30,732 B" in lines[("dflash", "fp8")]
    assert "35.60 TB" in lines[("eagle3", "bf16")] and "53.38 TB" in lines[("dflash", "bf16")]
    assert "needs a measured throughput" in out  # no rate: the storage alone, and it says what the time needs


def test_plan_storage_counts_the_warmups_prompt_tokens_and_reads_no_hub(tmp_path):
    from fleetgen.run.capture_plan import model_shape, plan_job_storage

    job = load_job(_job(tmp_path, rows=10, fleet="fleet:\n  model: some-org/some-model\n  replicas: 1\n"))
    with pytest.raises(ConfigError, match="reads no hub") as e:
        plan_job_storage(job)
    assert "--hidden-size" in (e.value.hint or "")
    stats = tmp_path / "stats.json"
    stats.write_bytes(
        orjson.dumps({"output_tokens_per_s": 1.0, "rows": {"ok": 4}, "tokens": {"completion": 400, "prompt": 200}})
    )
    warm = read_warmup(stats)
    assert warm.prompt_tokens_per_sample == pytest.approx(50)
    p = plan_job_storage(job, hidden_size=100, num_layers=8, warm=warm)
    assert p.pairs == 30 and p.tokens_per_sample == pytest.approx(150)  # 100 answer + 50 prompt tokens a sample
    assert "prompt included" in p.basis
    eagle = next(r for r in p.rows if r.preset == "eagle3" and r.estimate.dtype == "bf16")
    assert eagle.layers == [2, 4, 5, 8] and eagle.estimate.tokens == 4500
    assert model_shape(str(_qwen36_like(tmp_path))).num_layers == 64
