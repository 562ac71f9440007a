"""`status` shows the captures driving a fleet: each writes its counters to a file in the state dir."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from typer.testing import CliRunner

from fleetgen.cli.app import app
from fleetgen.cli.capture_status import capture_line
from fleetgen.fleet.capture_jobs import CaptureProgressFile, capture_job_path, read_capture_jobs
from fleetgen.fleet.state import FleetState, write_state


def _summary(**kw) -> SimpleNamespace:
    base = dict(already=10, captured=0, failed=0, from_text=0, tokens=0, bytes=0, planned_tokens=10_000, stopped=None)
    return SimpleNamespace(**(base | kw))


def test_the_progress_file_is_throttled_read_back_and_removed(tmp_path: Path):
    now = [1000.0]
    pub = CaptureProgressFile(tmp_path, tmp_path / "cap", clock=lambda: now[0])
    pub(_summary(captured=1, tokens=500, bytes=5_000_000))
    now[0] += 1.0
    pub(_summary(captured=2, tokens=1000, bytes=10_000_000))  # within 2 s of the last write: skipped
    ((job, running),) = read_capture_jobs(tmp_path)
    assert running and job.captured == 1 and job.output_dir == str((tmp_path / "cap").resolve())
    now[0] += 4.0
    pub(_summary(captured=4, tokens=2500, bytes=25_000_000, from_text=1, failed=2))
    ((job, _),) = read_capture_jobs(tmp_path)
    assert job.elapsed_s == 5.0 and job.tokens_per_s == 500.0 and job.bytes_per_s == 5e6
    assert job.eta_s == (10_000 - 2500) / 500
    line = capture_line(job, True)
    assert "4 rows this run (25% of the tokens planned), 10 before" in line
    assert "500 tok/s, 5.0 MB/s" in line and "ETA 0m15s" in line and "2 failed, 1 with ids from text" in line
    pub.close()
    assert not capture_job_path(tmp_path, pub.pid).exists() and read_capture_jobs(tmp_path) == []


def test_status_lists_a_dead_captures_last_report_as_not_running(tmp_path: Path):
    write_state(tmp_path, FleetState(engine="vllm", model="m", served_model_name="m"))  # a fleet of no replicas
    pub = CaptureProgressFile(tmp_path, tmp_path / "cap")
    pub(_summary(captured=3, tokens=300, stopped="free disk space fell under the margin"), force=True)
    path = capture_job_path(tmp_path, pub.pid)
    data = json.loads(path.read_text())
    path.unlink()
    capture_job_path(tmp_path, 999_999_999).write_text(json.dumps(data | {"pid": 999_999_999}))  # its process gone
    res = CliRunner().invoke(app, ["status", "--state", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "not running" in res.output and "capture pid 999999999" in res.output
    assert "stopped: free disk space fell under the margin" in res.output
    shown = json.loads(CliRunner().invoke(app, ["status", "--state", str(tmp_path), "--json"]).output)["captures"]
    assert [(c["pid"], c["running"], c["captured"]) for c in shown] == [(999_999_999, False, 3)]
