"""The metrics port: loopback unless told, never the API key, and a metric list that docs and dashboard can trust."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import ValidationError

from fleetgen.errors import ConfigError
from fleetgen.generate import GenerateConfig, Stats
from fleetgen.generate.observe.stats import ReplicaStats
from fleetgen.metrics import ALL, MetricsServer, safe_endpoint
from fleetgen.metrics.catalog import exposed_names

ROOT = Path(__file__).resolve().parents[2]
SECRET = "sk-fleetgen-test-SECRET-91b2"


def base(tmp_path: Path, **kw) -> dict:
    return {"prompts": tmp_path / "p.jsonl", "output_dir": tmp_path / "out", "endpoints": ["http://127.0.0.1:1"], **kw}


@pytest.mark.parametrize("host", ["0.0.0.0", "10.1.2.3", "::", "gpu-node-7"])
def test_non_loopback_metrics_host_is_refused_unless_allowed(tmp_path, host):
    with pytest.raises(ValidationError, match="metrics_allow_remote"):
        GenerateConfig(**base(tmp_path, metrics_port=9400, metrics_host=host))
    with pytest.raises(ConfigError, match="not a loopback address"):
        MetricsServer(host, 0)  # the server checks too, whoever builds it
    assert GenerateConfig(**base(tmp_path, metrics_port=9400, metrics_host=host, metrics_allow_remote=True))


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1"])
def test_loopback_hosts_need_no_opt_in(tmp_path, host):
    assert GenerateConfig(**base(tmp_path, metrics_port=0, metrics_host=host)).observe.metrics_host == host


def test_cli_refuses_a_remote_metrics_bind_before_any_work(tmp_path):
    (tmp_path / "p.jsonl").write_text('{"id": "a", "messages": [{"role": "user", "content": "hi"}]}\n')
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "fleetgen.cli.app",
            "generate",
            str(tmp_path / "p.jsonl"),
            "-o",
            str(tmp_path / "out"),
            "--endpoint",
            "http://127.0.0.1:1",
            "--metrics-port",
            "0",
            "--metrics-host",
            "0.0.0.0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "metrics_allow_remote" in r.stderr, r.stderr
    assert not (tmp_path / "out").exists()


def test_default_bind_is_loopback_and_the_page_never_shows_a_key():
    stats = Stats(total=6, ok=2, errors=1, completion_tokens=50)
    # An endpoint may carry credentials in its URL; the label must not.
    stats.replicas = [ReplicaStats(index=0, endpoint=f"http://user:{SECRET}@10.0.0.5:8000/?key={SECRET}", window=4)]
    with MetricsServer() as server:
        assert server.bound[0] == "127.0.0.1"
        server.show_generate(stats)
        text = urllib.request.urlopen(server.url, timeout=10).read().decode()
    assert SECRET not in text
    assert 'endpoint="http://10.0.0.5:8000/"' in text
    assert safe_endpoint("http://[::1]:30000") == "http://[::1]:30000"


def served_names(stage: str | None = "generate") -> set[str]:
    """Sample names a scrape shows, with one replica that answered and a restarted one."""
    stats = Stats(total=4, ok=1, completion_tokens=3)
    stats.replicas = [ReplicaStats(index=0, endpoint="http://127.0.0.1:1", window=2)]
    stats.replicas[0].latency.observe(0.3)
    capture = SimpleNamespace(captured=2, already=1, failed=0, from_text=1, tokens=90, bytes=9000, planned_tokens=300)
    with MetricsServer() as server:
        server.show_generate(stats)
        server.show_capture(capture)
        server.run.stage = stage
        server.run.restarts = lambda: {0: 1}
        text = urllib.request.urlopen(server.url, timeout=10).read().decode()
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


def test_the_catalog_is_exactly_what_a_scrape_shows():
    names = served_names()
    fleetgen = {n for n in names if n.startswith("fleetgen_")}
    assert fleetgen == {n for spec in ALL for n in exposed_names(spec)}
    assert all(spec.name.endswith("_total") == (spec.kind == "counter") for spec in ALL)
    assert any(n.startswith("process_") for n in names)


def test_a_plain_generate_shows_no_pipeline_stage():
    assert "fleetgen_run_stage" not in served_names(stage=None)


def test_docs_list_every_metric_and_the_dashboard_names_only_real_ones():
    names = served_names()
    documented = set(re.findall(r"^\| `(fleetgen_\w+)`", (ROOT / "docs/metrics.md").read_text(), re.M))
    assert documented == {spec.name for spec in ALL}
    dashboard = json.loads((ROOT / "examples/grafana/fleetgen-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 8
    used = {n for e in exprs for n in re.findall(r"\b((?:fleetgen|process)_[a-z_]+)", e)}
    assert used and used <= names, f"not served: {sorted(used - names)}"


def test_a_job_whose_process_is_gone_is_shown_as_not_running(tmp_path):
    """kill -9 leaves the progress file behind: status must not present it as a live job."""
    import os
    import time

    import psutil

    from fleetgen.cli.fleet import job_line
    from fleetgen.fleet.jobs import JobProgress, read_jobs, write_job

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    me = psutil.Process(os.getpid())
    common = dict(
        output_dir="/out",
        updated_at=time.time() - 90,
        total=10,
        done=4,
        ok=3,
        errors=1,
        resumed=0,
        samples_per_s=0.5,
        output_tokens_per_s=40.0,
        eta_s=12.0,
    )
    write_job(tmp_path, JobProgress(pid=gone.pid, create_time=time.time() - 100, **common))
    write_job(tmp_path, JobProgress(pid=me.pid, create_time=me.create_time(), **common))
    (tmp_path / "jobs" / "torn.json").write_text('{"pid": 1')  # unreadable files are skipped
    jobs = {j.pid: running for j, running in read_jobs(tmp_path)}
    assert jobs == {gone.pid: False, me.pid: True}
    dead = [j for j, running in read_jobs(tmp_path) if not running][0]
    line = job_line(dead, False)
    assert "not running" in line and "4/10 done (40%)" in line and "ETA 0m12s" in line and "1 errors" in line


def test_a_live_job_stays_running_when_the_wall_clock_steps(tmp_path, monkeypatch):
    """A laptop resumed from suspend: psutil's boot time, and every create_time with it, moves with the clock."""
    import os
    import time

    import psutil

    from fleetgen.fleet.jobs import JobProgress, read_jobs, write_job
    from fleetgen.fleet.process import started

    ctime, boot = started(os.getpid())
    write_job(
        tmp_path,
        JobProgress(
            pid=os.getpid(),
            create_time=ctime,
            boot_time=boot,
            output_dir="/out",
            updated_at=time.time(),
            total=1,
            done=0,
            ok=0,
            errors=0,
            resumed=0,
            samples_per_s=0.0,
            output_tokens_per_s=0.0,
            eta_s=None,
        ),
    )
    real = psutil._psplatform.boot_time
    monkeypatch.setattr(psutil._psplatform, "boot_time", lambda: real() + 7200.0)
    assert [running for _, running in read_jobs(tmp_path)] == [True]


def test_status_shows_each_replicas_limit_added_up_over_the_live_jobs_driving_it():
    import time

    from fleetgen.cli.fleet import job_limits, job_line
    from fleetgen.fleet.jobs import JobProgress

    common = dict(
        create_time=0.0,
        output_dir="/out",
        updated_at=time.time(),
        total=10,
        done=4,
        ok=4,
        errors=0,
        resumed=0,
        samples_per_s=0.5,
        output_tokens_per_s=40.0,
        concurrency="auto",
    )
    a = JobProgress(pid=1, limits={"http://r0": 40, "http://r1": 36}, **common)  # two shards of one job, say
    b = JobProgress(pid=2, limits={"http://r0": 24}, **common)
    dead = JobProgress(pid=3, limits={"http://r1": 500}, **common)
    assert job_limits([(a, True), (b, True), (dead, False)]) == {"http://r0": 64, "http://r1": 36}
    assert "in flight at most 40/36 per replica (auto)" in job_line(a, True)


def test_capture_metrics_read_the_capture_summary_at_scrape_time():
    summary = SimpleNamespace(captured=0, already=3, failed=0, from_text=0, tokens=0, bytes=0, planned_tokens=500)
    with MetricsServer() as server:
        server.show_capture(summary)
        summary.captured, summary.tokens, summary.bytes, summary.from_text, summary.failed = 4, 200, 8000, 1, 2
        server.show_capture(summary)  # the same run again: no second collector (a duplicate would fail the scrape)
        text = urllib.request.urlopen(server.url, timeout=10).read().decode()
    values = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
    assert values["fleetgen_capture_records_completed_total"] == 4
    assert values["fleetgen_capture_records_resumed_total"] == 3
    assert values["fleetgen_capture_records_failed_total"] == 2
    assert values["fleetgen_capture_records_from_text_total"] == 1
    assert values["fleetgen_capture_tokens_total"] == 200 and values["fleetgen_capture_bytes_total"] == 8000
    assert values["fleetgen_capture_planned_tokens"] == 500 and values["fleetgen_capture_tokens_per_second"] > 0
