"""The report after an interrupted run and its resumes: every total is what the results hold (issue 43).

Against the session's real vLLM-CPU fleet: `fleetgen generate` is stopped with Ctrl-C (SIGINT) once some
rows are in, resumed and killed with SIGKILL (no end recorded), then resumed to the end. Where each
stop lands varies from run to run; what is checked does not depend on it: the Overview's totals equal
the sums over results.jsonl, the wall time is the sum of the three runs, and the per-run table adds up.
Before runs.jsonl, the Overview gave the last run's wall time and tokens as if they were the output's.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleetgen.report import build_report
from fleetgen.rows.runs import read_runs

pytestmark = pytest.mark.engine

PROMPTS = 40  # x 2 samples, 4 in flight: the stops below land mid-job
SAMPLES = 2


def generate(prompts: Path, out: Path, state_dir: Path, log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fleetgen.cli.app",
            "generate",
            str(prompts),
            "-o",
            str(out),
            "--fleet",
            str(state_dir),
            "--samples",
            str(SAMPLES),
            "--max-tokens",
            "24",
            "--temperature",
            "0.8",
            "--concurrency",
            "4",
        ],
        stdout=open(log, "ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def results(out: Path) -> list[dict]:
    path = out / "results.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def stop_after(proc: subprocess.Popen, out: Path, rows: int, sig: int, log: Path) -> None:
    """Send `sig` once results.jsonl holds `rows` rows (or fail if the run ends first)."""
    deadline = time.monotonic() + 300
    while len(results(out)) < rows:
        assert proc.poll() is None, f"the run ended before {rows} rows: {log.read_text()[-2000:]}"
        assert time.monotonic() < deadline, f"no {rows} rows in 300 s: {log.read_text()[-2000:]}"
        time.sleep(0.2)
    proc.send_signal(sig)
    proc.wait(120)


def overview(md: str) -> dict[str, str]:
    """The Overview table's rows: label -> value."""
    section = md.split("## Overview", 1)[1].split("\n## ", 1)[0]
    return {m.group(1).strip(): m.group(2).strip() for m in re.finditer(r"^\| ([^|]+) \| ([^|]*) \|$", section, re.M)}


def figure(table: dict[str, str], prefix: str) -> float:
    hits = [v for k, v in table.items() if k.startswith(prefix)]
    assert len(hits) == 1, f"one Overview row starting {prefix!r}: {table}"
    return float(hits[0])


def test_totals_after_an_interrupt_a_kill_and_a_resume_are_what_the_results_hold(cpu_fleet, tmp_path):
    state_dir = Path(cpu_fleet.config["state_dir"])
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        "".join(
            json.dumps(
                {"id": f"p{i}", "messages": [{"role": "user", "content": f"Write two sentences about the number {i}."}]}
            )
            + "\n"
            for i in range(PROMPTS)
        )
    )
    out, log = tmp_path / "out", tmp_path / "generate.log"

    stop_after(generate(prompts, out, state_dir, log), out, 20, signal.SIGINT, log)  # Ctrl-C: ends with its stats
    first = len(results(out))
    stop_after(generate(prompts, out, state_dir, log), out, first + 20, signal.SIGKILL, log)  # no end line
    last = generate(prompts, out, state_dir, log)
    assert last.wait(300) == 0, log.read_text()[-3000:]

    rows = results(out)
    assert len(rows) == PROMPTS * SAMPLES and len({(r["id"], r["sample"]) for r in rows}) == len(rows)
    runs = read_runs(out)
    assert (
        len(runs) == 3
        and runs[1].ended_at is None
        and runs[0].stats["interrupted"]
        and not runs[2].stats["interrupted"]
    )

    md = build_report(out, dest=tmp_path / "report").read_text()
    table = overview(md)
    assert figure(table, "results (id, sample)") == len(rows)
    assert figure(table, "completion tokens") == sum(r["usage"]["completion_tokens"] for r in rows)
    assert figure(table, "prompt tokens") == sum(r["usage"]["prompt_tokens"] for r in rows)
    assert figure(table, "truncated rows") == sum(bool(r["truncated"]) for r in rows)
    killed_rows = [r for r in rows if runs[1].started_at <= r["timing"]["started_at"] < runs[2].started_at]
    killed_wall = max(r["timing"]["started_at"] + r["timing"]["latency_s"] for r in killed_rows) - runs[1].started_at
    wall = runs[0].stats["wall_s"] + killed_wall + runs[2].stats["wall_s"]
    assert figure(table, "generate wall time (s)") == pytest.approx(wall, abs=0.06)
    assert figure(table, "elapsed (s)") >= figure(table, "generate wall time (s)") - 0.1

    per_run = md.split("## Runs", 1)[1].split("\n## ", 1)[0]
    lines = [line.split(" | ") for line in per_run.splitlines() if re.match(r"^\| [123] \|", line)]
    assert [int(c[4]) for c in lines] == [
        sum(1 for r in rows if s <= r["timing"]["started_at"] < e)
        for s, e in (
            (runs[0].started_at, runs[1].started_at),
            (runs[1].started_at, runs[2].started_at),
            (runs[2].started_at, float("inf")),
        )
    ]
    assert sum(int(c[4]) for c in lines) == len(rows) and sum(int(c[5]) for c in lines) == figure(
        table, "completion tokens"
    )
    assert "interrupted" in lines[0][8] and "killed" in lines[1][8] and "finished" in lines[2][8]

    # the tokenizer is the fleet's model, which each run recorded; the ids of every turn are counted
    assert f"| tokenizer (for the round trip) | {cpu_fleet.model} |" in md
    assert f"| regenerated turns with the server's token ids (all result rows) | {len(rows)} |" in md
    assert "| turns whose decoded text re-encodes to other ids" in md
