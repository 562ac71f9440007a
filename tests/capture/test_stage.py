"""The capture stage of `fleetgen run`: after export, reading the generate stage's results, writing under WORKDIR."""

from __future__ import annotations

from pathlib import Path

from fleetgen.run import load_job
from fleetgen.run.pipeline import Pipeline
from fleetgen.run.stages import CaptureStage

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_capture_runs_after_export_on_the_generate_stages_results(tmp_path):
    job = load_job(EXAMPLES / "capture.yaml")
    stages = [s.name for s in Pipeline(job, resume=False, keep_fleet=False).stages()]
    assert stages.index("capture") == stages.index("export") + 1 < stages.index("report")
    stage = next(s for s in Pipeline(job, resume=False, keep_fleet=False).stages() if isinstance(s, CaptureStage))
    cfg = stage.config(tmp_path / "capture-fleet")
    assert cfg.results_dir == job.workdir / "generate" and cfg.output == job.workdir / "capture"
    assert cfg.model == "smollm2" and cfg.layers == "eagle3" and cfg.fleet == tmp_path / "capture-fleet"
    assert stage.outputs() == [job.workdir / "capture" / "captured.jsonl", job.workdir / "capture" / "state.json"]


def test_a_job_without_a_capture_section_has_no_capture_stage():
    job = load_job(EXAMPLES / "quickstart.yaml")
    assert "capture" not in [s.name for s in Pipeline(job, resume=False, keep_fleet=False).stages()]
