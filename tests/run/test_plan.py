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
