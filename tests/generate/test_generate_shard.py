"""`--shard i/N`: disjoint, complete shards; one logical output; exactly once under kill -9 of one shard.

End-to-end runs use a STAND-IN server (tests/generate/standin_server.py) with a per-token delay, so a
shard can be killed mid-run at a chosen moment; the real engine cannot be paced that way.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import orjson
import pytest
from helpers import keys_across_shards, write_prompts

import fleetgen.generate.prompts.worklist as worklist_mod
import fleetgen.generate.runner as runner_mod
from fleetgen.errors import ConfigError, ResumeMismatchError
from fleetgen.export.results import iter_errors, iter_results
from fleetgen.generate import GenerateConfig, generate
from fleetgen.generate.config.partition import Shard
from fleetgen.generate.observe.stats import Stats
from fleetgen.generate.prompts.worklist import WorkList
from fleetgen.report.data import load_run
from fleetgen.rows.doneset import DoneSet

SRC = Path(__file__).resolve().parents[2] / "src"


def test_shard_spec_is_checked():
    assert Shard.parse("1/4") == Shard(1, 4) and Shard.parse(None).whole
    for bad in ("4/4", "1/0", "a/2", "-1/2"):
        with pytest.raises(ConfigError, match="--shard"):
            Shard.parse(bad)


def _work(prompts: Path, samples: int, shard: Shard, done: DoneSet | None = None):
    work = WorkList(prompts, samples, done or DoneSet(), Stats(total=1000), shard=shard)
    items = [(i.id, i.sample, i.line) if hasattr(i, "reason") else (i[0].id, i[1], i[0].line) for i in work]
    return items, work.stats.resumed, work.next_resumed


def test_shards_split_the_work_of_the_whole_job_disjointly(tmp_path):
    """Valid rows, rows without id, duplicates and bad rows: each item of the whole job in exactly one shard."""
    rng = random.Random(9)
    lines = []
    for i in range(300):
        r = rng.random()
        if r < 0.05:
            lines.append(b'{"id": "x", oops')
        elif r < 0.1:
            lines.append(orjson.dumps({"messages": [{"role": "user", "content": f"no id {i}"}]}))
        elif r < 0.15:
            lines.append(
                orjson.dumps({"id": f"p{rng.randrange(i + 1)}", "messages": [{"role": "user", "content": "dup"}]})
            )
        elif r < 0.2:
            lines.append(orjson.dumps({"id": f"q{i}", "conversations": [{"from": "human", "value": "sharegpt"}]}))
        else:
            lines.append(orjson.dumps({"id": f"p{i}", "messages": [{"role": "user", "content": f"q{i}"}]}))
    prompts = tmp_path / "p.jsonl"
    prompts.write_bytes(b"\n".join(lines) + b"\n")
    whole, _, whole_next = _work(prompts, 2, Shard())
    for n in (2, 3):
        parts = [_work(prompts, 2, Shard(i, n)) for i in range(n)]
        merged = Counter(item for items, _, _ in parts for item in items)
        assert max(merged.values()) == 1 and set(merged) == set(whole) and len(whole) == len(set(whole))
        assert all(len(items) > 30 for items, _, _ in parts)  # each shard gets a real share
        assert sum(nxt for _, _, nxt in parts) == whole_next
    ids_of = [{i[0] for i in _work(prompts, 1, Shard(k, 2))[0] if i[1] is not None} for k in range(2)]
    assert not ids_of[0] & ids_of[1]  # an id (its samples and its duplicates) lives in one shard


def _cfg(prompts, outdir, url, **kw):
    return GenerateConfig(
        prompts=prompts,
        output_dir=outdir,
        endpoints=[url],
        max_tokens=8,
        samples=2,
        concurrency=8,
        hedge=False,
        commit_interval_s=0.0,
        **kw,
    )


def test_kill9_of_one_shard_then_resume_is_exactly_once_across_shards(tmp_path, standin):
    n = 240
    prompts = write_prompts(tmp_path / "p.jsonl", n)
    out = tmp_path / "out"
    expected = {(f"p{i}", k) for i in range(n) for k in range(2)}
    args = [
        sys.executable,
        "-m",
        "fleetgen.cli.app",
        "generate",
        str(prompts),
        "-o",
        str(out),
        "--endpoint",
        standin,
        "--model",
        "standin",
        "--samples",
        "2",
        "--max-tokens",
        "8",
        "--concurrency",
        "8",
        "--no-hedge",
    ]
    env = {"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"}
    procs = [
        subprocess.Popen([*args, "--shard", f"{i}/2"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for i in range(2)
    ]
    victim = out / "results.shard-1-of-2.jsonl"
    t0 = time.monotonic()
    while (not victim.exists() or victim.stat().st_size < 2000) and time.monotonic() - t0 < 60:
        time.sleep(0.01)
    assert procs[1].poll() is None, "shard 1 finished before its kill: make the job longer"
    procs[1].send_signal(signal.SIGKILL)
    procs[1].wait()
    assert procs[0].wait(timeout=120) == 0, procs[0].stderr.read()[-1500:]
    partial = keys_across_shards(out)
    assert max(partial.values()) == 1 and set(partial) < expected  # shard 1's share is not all there
    again = subprocess.run([*args, "--shard", "1/2"], env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr[-1500:]
    keys = keys_across_shards(out)
    assert max(keys.values()) == 1 and set(keys) == expected
    for p in (procs[0], procs[1]):
        p.stderr.close()
    # One logical output: export's reader and the report see every row once, and the merged stats.
    assert sorted((r["id"], r["sample"]) for r in iter_results(out)) == sorted(expected)
    assert list(iter_errors(out)) == []
    run = load_run(out)
    assert run.stats["shards"] == 2 and run.stats["rows"]["ok"] + run.stats["rows"]["resumed"] >= 2 * n
    # A plain run (or another split) is refused: it would not see the shards' rows.
    with pytest.raises(ResumeMismatchError, match="shards"):
        generate(_cfg(prompts, out, standin), handle_signals=False)


def test_a_resume_of_an_untouched_finished_output_reads_no_prompts(tmp_path, standin, monkeypatch):
    prompts = write_prompts(tmp_path / "p.jsonl", 30)
    with open(prompts, "a") as f:
        f.write('{"id": "p3", "messages": [{"role": "user", "content": "a duplicate"}]}\n{"id": 5, oops\n')
    out = tmp_path / "out"
    first = generate(_cfg(prompts, out, standin), handle_signals=False)
    assert first.ok == 60 and first.input_errors == 2 and (out / "complete.json").exists()
    reference = generate(_cfg(prompts, out, standin), handle_signals=False)  # the mark is checked, then used
    monkeypatch.setattr(runner_mod, "read_complete", lambda *a: None)
    full = generate(_cfg(prompts, out, standin), handle_signals=False)  # the normal path: the skip pass
    monkeypatch.undo()
    assert (reference.resumed, reference.ok, reference.errors) == (full.resumed, full.ok, full.errors) == (62, 0, 0)

    def no_prompts(*a, **kw):
        raise AssertionError("the prompt file was read")

    monkeypatch.setattr(worklist_mod, "iter_rows", no_prompts)
    assert generate(_cfg(prompts, out, standin), handle_signals=False).resumed == 62
    # Any write to the journal voids the mark: the run takes the normal path (and here finds a sample to redo).
    lines = (out / "results.jsonl").read_bytes().splitlines(keepends=True)
    (out / "results.jsonl").write_bytes(b"".join(lines[:-1]))
    (out / "results.keys").unlink()
    monkeypatch.undo()
    redo = generate(_cfg(prompts, out, standin), handle_signals=False)
    assert redo.ok == 1 and redo.resumed == 61
