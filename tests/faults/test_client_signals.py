"""The client killed (-9) at 20 seeded moments of one run, and stopped by SIGTERM / Ctrl-C; each time resumed.

The server is a STAND-IN (tests/generate/standin_server.py) with a per-token delay, so a run lasts
long enough to be interrupted anywhere (start-up, journal open, mid-batch, between batches).
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import time

import pytest
from faultkit import audit, cli, write_yaml
from helpers import write_prompts
from standin_server import StandinServer

N, SAMPLES = 800, 2
IDS = [f"p{i}" for i in range(N)]


@pytest.fixture(scope="module")
def slow_standin():
    server = StandinServer(delay_per_token_s=0.02, max_concurrent=16)
    url = server.start()
    yield url
    server.stop()


def _job(tmp_path, url, n=N):
    write_prompts(tmp_path / "p.jsonl", n)
    cfg = write_yaml(
        tmp_path / "gen.yaml",
        {
            "prompts": tmp_path / "p.jsonl",
            "output_dir": tmp_path / "out",
            "endpoints": [url],
            "model": "standin",
            "samples": SAMPLES,
            "max_tokens": 8,
            "concurrency": 16,
            "hedge": False,
            "commit_interval_s": 0.0,
        },
    )
    # Flags given on the command line must match the YAML's (the CLI applies non-default flags over it).
    return cli("generate", str(tmp_path / "p.jsonl"), "-o", str(tmp_path / "out"), "--config", str(cfg))


def _size(path):
    return path.stat().st_size if path.exists() else 0


def test_kill9_at_20_seeded_moments_then_resume(tmp_path, slow_standin, recorder):
    args = _job(tmp_path, slow_standin)
    out = tmp_path / "out"
    rng = random.Random(20240610)
    moments, phases, torn = [], [], 0
    startup_kills = set(rng.sample(range(20), 5))  # 5 kills in start-up, 15 while results are written
    for k in range(20):
        before = _size(out / "results.jsonl")
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        t0 = time.monotonic()
        if k in startup_kills:
            time.sleep(rng.uniform(0.2, 1.5))
        else:
            while _size(out / "results.jsonl") == before and time.monotonic() - t0 < 30 and proc.poll() is None:
                time.sleep(0.01)
            time.sleep(rng.uniform(0.0, 0.8))
        delay = time.monotonic() - t0
        if proc.poll() is not None:
            pytest.fail(f"run {k} finished before its kill: make the job longer\n{proc.stderr.read()[-800:]}")
        proc.kill()  # SIGKILL: no handler, no flush, no cleanup
        proc.wait()
        proc.stderr.close()
        moments.append(round(delay, 2))
        phases.append("writing" if _size(out / "results.jsonl") > before else "start-up")
        a = audit(out, IDS, SAMPLES)
        torn += a.torn_tail
        # Between kills nothing may be duplicated and no complete
        # line may be corrupt (a torn tail is repaired on resume).
        assert a.duplicated == 0 and a.corrupt == int(a.torn_tail), (k, a)
    done = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-1500:]
    final = audit(out, IDS, SAMPLES)
    stats = json.loads((out / "stats.json").read_text())
    mid = phases.count("writing")
    recorder.record(
        "client_kill9",
        fault="kill -9 of the client (20 seeded moments, one run)",
        injected=f"SIGKILL to `fleetgen generate`, seed 20240610: 5 kills at uniform(0.2, 1.5)s after start, 15 at "
        f"uniform(0, 0.8)s after its first new result bytes; "
        f"{mid} kills landed while results were being written, {20 - mid} in start-up; {torn} left a torn tail",
        runs=21,
        audit=final,
        outcome=f"every resume repaired the tail and went on; the last found {stats['rows']['resumed']} rows done "
        f"and finished: {final.results} results, {final.errors} errors",
        extra={"moments_s": moments, "phases": phases, "torn_tails": torn},
    )
    final.assert_clean()
    assert final.results == N * SAMPLES
    assert mid >= 12, f"most kills must land mid-run, got {phases}"


@pytest.mark.parametrize(
    "signals", [["SIGTERM"], ["SIGINT"], ["SIGINT", "SIGINT"]], ids=["sigterm", "ctrl-c", "ctrl-c-twice"]
)
def test_graceful_stop_then_resume(tmp_path, slow_standin, recorder, signals):
    n = 300
    ids = IDS[:n]
    args = _job(tmp_path, slow_standin, n)
    out = tmp_path / "out"
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and _size(out / "results.jsonl") < 10_000:
        time.sleep(0.05)
    t0 = time.monotonic()
    for i, name in enumerate(signals):
        if i:
            time.sleep(0.05)
        proc.send_signal(getattr(signal, name))
    _, err = proc.communicate(timeout=60)
    stop_s = time.monotonic() - t0
    assert proc.returncode == 130, err[-1500:]
    assert "stopping: waiting up to" in err
    assert "Traceback" not in err, err[-2000:]
    stats = json.loads((out / "stats.json").read_text())
    assert stats["interrupted"] and 0 < stats["rows"]["ok"] < n * SAMPLES
    first = audit(out, ids, SAMPLES)
    assert first.duplicated == 0 and first.corrupt == 0 and not first.torn_tail
    resumed = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-1500:]
    final = audit(out, ids, SAMPLES)
    label = " then ".join(signals)
    recorder.record(
        f"client_{'_'.join(s.lower() for s in signals)}",
        fault=f"{label} to the client",
        injected=f"{label} to `fleetgen generate` after ~10 KB of results (300 prompts x 2 samples)",
        runs=2,
        audit=final,
        outcome=f"exit 130 in {stop_s:.1f}s with 'stopping: waiting up to ...', stats.json interrupted, "
        f"{stats['rows']['ok']} rows kept; resume completed",
    )
    final.assert_clean()
