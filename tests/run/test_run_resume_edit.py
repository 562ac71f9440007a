"""`fleetgen run --resume` after the job file was edited: a field that says how rows are made continues the job.

Issue 42: `run` once fingerprinted its whole generate section, so retuning `concurrency` of an interrupted
job moved every finished row aside and generated them all again. A field that says what a row is
(here `temperature`) still starts anew, the earlier results moved aside.

Against a STAND-IN server (tests/generate/standin_server.py), not an engine: it answers the first
requests and holds every later one until released, so the job is interrupted at a point the test
chooses, without timing.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "generate"))
from standin_server import StandinServer  # noqa: E402

ROWS = 40
ANSWERED = 12  # the stand-in answers this many requests, then holds the rest until released


def fleetgen_run(job: Path, *args: str, log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "fleetgen.cli.app", "run", str(job), *args],
        stdout=open(log, "wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def results(outdir: Path) -> list[dict]:
    path = outdir / "results.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def wait_for(cond, proc: subprocess.Popen, log: Path, what: str, timeout: float = 120) -> None:
    """Until `cond` holds; a generous bound only so that a broken run fails instead of hanging."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert proc.poll() is None, f"the run exited ({proc.returncode}) before {what}:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"no {what} within {timeout:.0f} s:\n{log.read_text()[-3000:]}"
        time.sleep(0.1)


def asked(bodies: list[dict]) -> set[str]:
    """The prompt ids these request bodies ask about (each prompt's question names its id)."""
    return {b["messages"][-1]["content"].split()[-1] for b in bodies}


def test_resume_after_editing_concurrency_continues_and_a_sampling_edit_starts_anew(tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        "".join(
            json.dumps({"id": f"p{i}", "messages": [{"role": "user", "content": f"question p{i}"}]}) + "\n"
            for i in range(ROWS)
        )
    )
    server = StandinServer(hang_after=ANSWERED)
    url = server.start()
    job = tmp_path / "job.yaml"
    spec = {
        "workdir": str(tmp_path / "work"),
        "generate": {
            "prompts": str(prompts),
            "endpoints": [url],
            "max_tokens": 8,
            "concurrency": 4,
            "warmup": False,
            "token_ids": False,
            "hedge": False,
            "commit_interval_s": 0,
        },
    }
    job.write_text(yaml.safe_dump(spec))
    outdir = tmp_path / "work" / "generate"
    log = tmp_path / "run.log"
    first = fleetgen_run(job, log=log)
    try:
        wait_for(lambda: len(results(outdir)) >= ANSWERED and server.hung > 0, first, log, f"{ANSWERED} rows")
        first.send_signal(signal.SIGKILL)  # interrupted mid-job, requests in flight
        first.wait(30)
        before = (outdir / "results.jsonl").read_bytes()
        done_before = {r["id"] for r in results(outdir)}
        assert len(done_before) == ANSWERED

        spec["generate"]["concurrency"] = 16  # how rows are made, not what they are
        job.write_text(yaml.safe_dump(spec))
        server.release()  # every request from now on is answered at once
        sent = len(server.bodies)
        second = fleetgen_run(job, "--resume", log=log)
        assert second.wait(120) == 0, log.read_text()[-3000:]
        out = log.read_text()
        assert not list(outdir.parent.glob("generate.replaced-*")) and "job changed" not in out, out[-3000:]
        assert (outdir / "results.jsonl").read_bytes().startswith(before), "the rows of the first run were kept"
        assert not asked(server.bodies[sent:]) & done_before, "a finished row was generated again"
        ids = Counter(r["id"] for r in results(outdir))
        assert set(ids) == {f"p{i}" for i in range(ROWS)} and set(ids.values()) == {1}

        spec["generate"]["temperature"] = 0.2  # what a row is: another job
        job.write_text(yaml.safe_dump(spec))
        sent = len(server.bodies)
        third = fleetgen_run(job, "--resume", log=log)
        assert third.wait(120) == 0, log.read_text()[-3000:]
        moved = list(outdir.parent.glob("generate.replaced-*"))
        assert len(moved) == 1 and len(results(moved[0])) == ROWS, "the earlier job's rows are kept aside"
        assert "earlier results kept in" in log.read_text()
        assert asked(server.bodies[sent:]) == {f"p{i}" for i in range(ROWS)}
        assert {r["sampling"]["temperature"] for r in results(outdir)} == {0.2} and len(results(outdir)) == ROWS
    finally:
        for p in (first,):
            if p.poll() is None:
                p.kill()
        server.stop()
