"""The run report on the committed real SmolLM2 run: every chart written and referenced, numbers that match.

SmolLM2 writes no reasoning: the reasoning-vs-answer chart is left out, with a line saying why.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import matplotlib.image as mpimg
import pytest

import fleetgen.report as rp
from fleetgen.report import build_report, load_run

RUN = Path(__file__).parents[1] / "export" / "fixtures" / "smollm2-run"
CHARTS = {"throughput", "output_lengths", "prompt_lengths", "finish_reasons", "error_reasons", "mix_shares"}


def test_public_api_is_declared():
    assert sorted(rp.__all__) == sorted(set(rp.__all__))
    assert all(getattr(rp, n) is not None for n in rp.__all__)


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    dest = tmp_path_factory.mktemp("report")
    mix = dest / "mix"
    mix.mkdir()
    shares = [
        {"domain": "general", "share": 0.4},
        {"domain": "code", "share": 0.2},
        {"domain": "math", "share": 0.2},
        {"domain": "tool_use", "share": 0.2},
    ]
    (mix / "summary.json").write_text(json.dumps({"domains": shares}))
    return build_report(RUN, html=True, dest=dest, mix_report=mix, tokenizer="/nonexistent")


def test_every_chart_is_a_png_and_is_referenced(report):
    md = report.read_text()
    images = set(re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md))
    assert {Path(i).stem for i in images} == CHARTS
    for name in images:
        img = mpimg.imread(report.parent / name)
        assert img.shape[0] > 200 and img.shape[1] > 500
        assert img[..., :3].std() > 0.01  # not a blank canvas
    html = (report.parent / "report.html").read_text()
    assert all(f"src='{name}'" in html for name in images)
    assert "*No reasoning vs answer chart: no row has reasoning_content" in md
    assert not (report.parent / "reasoning_vs_answer.png").exists()


def test_numbers_match_the_run(report):
    results = [json.loads(line) for line in (RUN / "results.jsonl").read_text().splitlines()]
    errors = [json.loads(line) for line in (RUN / "errors.jsonl").read_text().splitlines()]
    md = report.read_text()
    assert f"| results (id, sample) | {len(results)} |" in md
    tokens = sum(r["usage"]["completion_tokens"] for r in results)
    assert f"| completion tokens (all {len(results)} result rows) | {tokens} |" in md
    # made by three runs before runs.jsonl existed: the report says its wall time is the last run's only
    assert "| wall time (s), the last run only (stats.json: this output has no runs.jsonl) |" in md
    assert f"| distinct prompts | {len({r['id'] for r in results})} |" in md
    assert f"| error rows | {len(errors)} |" in md
    stops = sum(f == "stop" for r in results for f in r["finish_reason"])
    assert re.search(rf"\| stop \| {stops} \|", md)
    assert "| general |" in md and "40.0%" in md  # the mix target share is shown beside the achieved one


def test_load_run_groups_errors_by_reason():
    run = load_run(RUN)
    errors = [json.loads(line) for line in (RUN / "errors.jsonl").read_text().splitlines()]
    assert sum(run.errors.values()) == len(errors)
    assert all(
        reason.split(":")[0] in {"rejected", "failed", "truncated", "input", "incomplete", "internal"}
        for reason in run.errors
    )
    assert len(run.rows) == len((RUN / "results.jsonl").read_text().splitlines())
