"""The report stage is redone when the capture it counts changes, and is what it was for a job without one."""

from __future__ import annotations

import asyncio
from pathlib import Path

from fleetgen.run import load_job
from fleetgen.run.book import fingerprint
from fleetgen.run.stage import Context, RunSummary
from fleetgen.run.stages import ReportStage

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _fp(fingerprints: dict[str, str]) -> str:
    job = load_job(EXAMPLES / "capture.yaml")
    ctx = Context(job, lambda *a: None, RunSummary(workdir=job.workdir), fingerprints=dict(fingerprints))
    return asyncio.run(ReportStage(ctx).fingerprint())


def test_the_reports_fingerprint_follows_the_capture_it_counts():
    plain = _fp({"generate": "g1"})
    assert plain == fingerprint({"html": False}, "g1")  # no capture: the fingerprint it always had
    assert _fp({"generate": "g1", "capture": "c1"}) not in (plain, _fp({"generate": "g1", "capture": "c2"}))
