"""Profile assignment is stable across kill -9 and resume: a sample redone after a kill gets the profile it had.

The server is a STAND-IN (tests/generate/standin_server.py) with a per-token delay; it keeps every
request body, so samples in flight at a kill and sent again after the resume can be compared.
"""

from __future__ import annotations

import random
import subprocess
import time
from collections import defaultdict

from faultkit import audit, cli, write_yaml
from helpers import read_jsonl, write_prompts
from standin_server import StandinServer

from fleetgen.generate.config.profiles import NOT_SAMPLING, SamplingProfile, assign
from fleetgen.generate.config.sampling import derived_seed
from fleetgen.generate.dispatch.warmup import WARMUP_PROMPT

N, SAMPLES, SEED = 300, 2, 11
PROFILES = [
    {"name": "cold", "temperature": 0.2, "thinking": False},
    {"name": "hot", "weight": 3, "temperature": 1.1, "top_k": 40, "extra_body": {"min_tokens": 1}},
]


def _size(path):
    return path.stat().st_size if path.exists() else 0


def test_profiles_survive_kill9_and_resume(tmp_path):
    server = StandinServer(delay_per_token_s=0.02, max_concurrent=16)
    url = server.start()
    try:
        write_prompts(tmp_path / "p.jsonl", N)
        out = tmp_path / "out"
        conf = write_yaml(
            tmp_path / "gen.yaml",
            {
                "prompts": tmp_path / "p.jsonl",
                "output_dir": out,
                "endpoints": [url],
                "model": "standin",
                "samples": SAMPLES,
                "max_tokens": 8,
                "concurrency": 16,
                "hedge": False,
                "commit_interval_s": 0.0,
                "seed": SEED,
                "profiles": PROFILES,
            },
        )
        args = cli("generate", str(tmp_path / "p.jsonl"), "-o", str(out), "--config", str(conf))
        rng = random.Random(5)
        for k in range(3):
            before = _size(out / "results.jsonl")
            proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            t0 = time.monotonic()
            while _size(out / "results.jsonl") == before and time.monotonic() - t0 < 30 and proc.poll() is None:
                time.sleep(0.01)
            time.sleep(rng.uniform(0.1, 0.6))
            assert proc.poll() is None, f"run {k} finished before its kill: {proc.stderr.read()[-800:]}"
            proc.kill()
            proc.wait()
            proc.stderr.close()
        done = subprocess.run(args, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-1500:]
    finally:
        server.stop()
    final = audit(out, [f"p{i}" for i in range(N)], SAMPLES)
    final.assert_clean()
    assert final.results == N * SAMPLES

    profiles = [SamplingProfile(**p) for p in PROFILES]
    sent = defaultdict(list)  # seed of (id, sample, turn 0) -> the sampling part of every request sent for it
    for b in server.bodies:
        if b["messages"][-1]["content"] == WARMUP_PROMPT:
            continue  # each run's warm-up of the profiles' paths (generate/dispatch/warmup.py), not a sample
        sent[b["seed"]].append({k: v for k, v in b.items() if k not in NOT_SAMPLING})
    resent = [s for s, bodies in sent.items() if len(bodies) > 1]
    assert resent, "no sample was in flight at a kill: the test shows nothing"
    assert all(all(b == bodies[0] for b in bodies) for bodies in sent.values())  # the same profile every time
    for r in read_jsonl(out / "results.jsonl"):
        seed = derived_seed(SEED, r["id"], r["sample"], 0)
        assert r["profile"] == assign(profiles, SEED, r["id"], r["sample"]).name
        assert r["sampling"] == {**sent[seed][0], "reasoning": "save", "truncation": "keep"}  # + the job's policies
    print(f"{len(resent)} samples sent again after a kill, each with the profile it had")
