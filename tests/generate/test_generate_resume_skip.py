"""The resume's fast skip (a finished row skipped without normalizing it) must agree with the full path.

Each test runs the same resume twice, with `WorkList.fast_skip` on and off (off is the code before
the fast skip: every row normalized), and compares what comes out.
"""

from __future__ import annotations

import random
import shutil

import orjson
import pytest
from helpers import read_jsonl
from standin_server import StandinServer

from fleetgen.generate import GenerateConfig, generate
from fleetgen.generate.journal.directory import ERRORS, RESULTS
from fleetgen.generate.journal.linekey import dumps_line
from fleetgen.generate.observe.stats import Stats
from fleetgen.generate.prompts import worklist as worklist_mod
from fleetgen.generate.prompts.reader import normalize, raw_id, surely_valid
from fleetgen.generate.prompts.worklist import WorkList
from fleetgen.rows.doneset import DoneSet
from fleetgen.rows.prompt import RecordError

MISSING = object()

# Pieces of rows, valid and not, for the random tests below.
IDS = ["a", "b", "c", "7", 7, "", True, None, 1.5, ["a"], MISSING]
MESSAGES = [
    {"role": "user", "content": "q"},
    {"role": "user", "content": "q"},
    {"role": "system", "content": "s"},
    {"role": "assistant", "content": "x"},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "c1"}]},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "c1"}]},
    {"role": "assistant", "content": "x", "tool_calls": "not json"},
    {"role": "assistant", "content": "x", "tool_calls": "[]"},
    {"role": "assistant", "content": "x", "tool_calls": {"id": "c1"}},
    {"role": "user", "content": "q", "tool_calls": "{oops"},
    {"role": "user", "content": "q", "tool_calls": 3},
    {"role": "tool", "content": "r", "tool_call_id": "c1", "name": "f"},
    {"role": "user", "content": [{"type": "text", "text": "q"}]},
    {"role": "user", "content": [{"type": "image_url"}]},
    {"role": "robot", "content": "q"},
    {"role": ["user"], "content": "q"},
    {"role": "user", "content": 5},
    {"role": "user"},
    {"from": "human", "value": "q"},
    "a string",
]
TOOLS = [MISSING, None, [], [{"type": "function"}], "[]", "[oops", [1], {"type": "function"}]
META = [MISSING, None, {}, {"source": "x"}, [], "m"]


def _plain_id(row) -> str | None:
    """The id the fast skip would use for a row, or None when it leaves the row to the full path."""
    rid = raw_id(row)
    return rid if rid is not None and surely_valid(row) else None


def random_row(rng: random.Random):
    if rng.random() < 0.4:  # a plain row, as `mix` writes them: the fast path's case
        return {"id": rng.choice(["a", "b", "c", "7", 7]), "messages": [{"role": "user", "content": "q"}], "meta": {}}
    if rng.random() < 0.03:
        return rng.choice([[1, 2], "row", 5, None])
    row = {}
    rid = rng.choice(IDS)
    if rid is not MISSING:
        row["id"] = rid
    shape = rng.random()
    if shape < 0.85:
        pool = MESSAGES[: rng.choice([2, 6, len(MESSAGES)])]  # often from the valid few, so the fast path is reached
        row["messages"] = [rng.choice(pool) for _ in range(rng.choice([0, 1, 1, 2, 3]))]
    elif shape < 0.9:
        row["messages"] = rng.choice(["q", None, {"role": "user", "content": "q"}])
    if shape >= 0.85 and rng.random() < 0.6:
        row["conversations"] = rng.choice([[{"from": "human", "value": "q"}], [{"role": "user", "content": "q"}], "q"])
    for key, choices in (("tools", TOOLS), ("meta", META)):
        value = rng.choice(choices)
        if value is not MISSING:
            row[key] = value
    return row


def test_fast_skip_takes_only_rows_normalize_accepts_with_the_id_it_gives():
    rng = random.Random(11)
    answered = 0
    for _ in range(30_000):
        row = random_row(rng)
        rid = _plain_id(row)
        if rid is None:
            continue
        answered += 1
        try:
            rec = normalize(row, 1)
        except RecordError as e:
            pytest.fail(f"fast skip would take {rid!r}, a row normalize refuses ({e}): {row!r}")
        assert rec.id == rid, row
    assert answered > 1_000  # the fast path is not vacuous on the common shapes


@pytest.mark.parametrize(
    "row, rid",
    [
        ({"id": "a", "messages": [{"role": "user", "content": "q"}]}, "a"),
        (
            {"id": 7, "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}], "meta": {}},
            "7",
        ),
        (
            {
                "id": "t",
                "messages": [
                    {"role": "user", "content": "q"},
                    {"role": "assistant", "content": "", "tool_calls": []},
                    {"role": "tool", "content": "r"},
                ],
                "tools": [{"type": "function"}],
            },
            "t",
        ),
        ({"messages": [{"role": "user", "content": "q"}]}, None),  # no id: normalize hashes the content
        ({"id": True, "messages": [{"role": "user", "content": "q"}]}, None),
        ({"id": "", "messages": [{"role": "user", "content": "q"}]}, None),
        ({"id": "a", "messages": [{"role": "assistant", "content": "x"}]}, None),
        ({"id": "a", "messages": [{"role": "system", "content": "s"}]}, None),
        ({"id": "a", "messages": []}, None),
        ({"id": "a", "conversations": [{"from": "human", "value": "q"}]}, None),  # valid, but left to normalize
    ],
)
def test_fast_skip_on_typical_rows(row, rid):
    assert _plain_id(row) == rid


def _work(prompts, done: DoneSet, samples: int, *, fast: bool):
    """Everything the skip pass produces: yielded items, counters, samples in flight per id."""
    work = WorkList(prompts, samples, done, Stats(total=100 * samples))
    work.fast_skip = fast
    items = list(work)
    return items, work.stats.resumed, work.remaining


def _done_copy(done: DoneSet) -> DoneSet:
    return done.copy()


def test_fast_and_full_skip_agree_on_random_resumes(tmp_path):
    """Random files (duplicates, bad rows, no ids) against random done sets and recorded bad lines."""
    rng = random.Random(5)
    fast_skips = 0
    for case in range(400):
        path = tmp_path / f"p{case}.jsonl"
        lines = []
        for _ in range(rng.randint(1, 14)):
            r = rng.random()
            lines.append(b"" if r < 0.03 else b'{"id": "a", oops' if r < 0.07 else orjson.dumps(random_row(rng)))
        path.write_bytes(b"\n".join(lines) + b"\n")
        samples = rng.choice([1, 2, 3])
        done = DoneSet()
        for rid in ("a", "b", "c", "7"):
            for k in range(samples):
                if rng.random() < 0.8:
                    done.add(rid, k)
        done.bad_lines = {n for n in range(1, len(lines) + 1) if rng.random() < 0.25}
        fast = _work(path, _done_copy(done), samples, fast=True)
        full = _work(path, _done_copy(done), samples, fast=False)
        assert fast == full, f"case {case}: {path.read_text()}"
        fast_skips += sum(
            1
            for n, raw in enumerate(lines, 1)
            if raw
            and not raw.endswith(b"oops")
            and n not in done.bad_lines
            and (rid := _plain_id(orjson.loads(raw))) is not None
            and done.has_all(rid, samples)
        )
    assert fast_skips > 300  # the cases do reach the fast path


def test_fast_skip_does_not_normalize_finished_rows(tmp_path, monkeypatch):
    path = tmp_path / "p.jsonl"
    path.write_bytes(
        b"".join(
            orjson.dumps({"id": f"p{i}", "messages": [{"role": "user", "content": "q"}]}) + b"\n" for i in range(50)
        )
    )
    done = DoneSet()
    for i in range(40):
        done.add(f"p{i}", 0)
    normalized = []
    real = worklist_mod.prompt_of
    monkeypatch.setattr(worklist_mod, "prompt_of", lambda n, row: normalized.append(n) or real(n, row))
    items, resumed, _ = _work(path, done, 1, fast=True)
    assert resumed == 40 and [p.id for p, _ in items] == [f"p{i}" for i in range(40, 50)]
    assert normalized == list(range(41, 51))  # only the rows still to do


# --- end to end: the real generate() on a stand-in server, fast skip on and off --------------------------

# A resume where the full path's outcome is not "skip": each row names the case it is for. Before the
# resume, results hold every sample of a, b, c and 7 and sample 0 of e; errors hold the row errors of
# lines 4 and 9 (line 9's row was refused by an older version; both now normalize).
ROWS = [
    # 1: refused by normalize (not a user turn first) though all of a's samples are done: a row error,
    #    and it must not claim a (line 2 is a's first line)
    {"id": "a", "messages": [{"role": "assistant", "content": "x"}]},
    {"id": "a", "messages": [{"role": "user", "content": "q"}]},  # 2: a's first line, skipped
    {"id": "a", "messages": [{"role": "user", "content": "q again"}]},  # 3: later duplicate of a finished id
    {"id": "b", "messages": [{"role": "user", "content": "q"}]},  # 4: recorded bad line that normalizes now:
    #    the full path claims b here and skips it (all done), so line 5 is a new duplicate
    {"id": "b", "messages": [{"role": "user", "content": "q"}]},  # 5
    {"id": 7, "messages": [{"role": "user", "content": "q"}]},  # 6: int id, done as "7"
    {"messages": [{"role": "user", "content": "no id"}]},  # 7: content-hash id, not done: generated
    {"id": "e", "messages": [{"role": "user", "content": "q"}]},  # 8: sample 0 done, sample 1 generated
    {"id": "f", "messages": [{"role": "user", "content": "q"}]},  # 9: recorded bad line, valid now: generated
    {"id": "c", "conversations": [{"from": "human", "value": "q"}]},  # 10: ShareGPT row of a finished id
    {"id": True, "messages": [{"role": "user", "content": "q"}]},  # 11: refused id
]


def _prior_state(outdir, samples: int) -> None:
    outdir.mkdir()
    results = [
        dumps_line({"id": rid, "sample": k, "messages": [], "meta": None}) for rid in "abc7" for k in range(samples)
    ]
    results.append(dumps_line({"id": "e", "sample": 0, "messages": [], "meta": None}))
    (outdir / RESULTS).write_bytes(b"".join(results))
    (outdir / ERRORS).write_bytes(
        b"".join(
            dumps_line({"id": rid, "sample": None, "line": line, "kind": "input", "reason": "refused before"})
            for rid, line in (("b", 4), ("f", 9))
        )
    )


def test_end_to_end_resume_writes_the_same_files_with_fast_skip_on_and_off(tmp_path, monkeypatch):
    prompts = tmp_path / "p.jsonl"
    prompts.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in ROWS))
    _prior_state(tmp_path / "before", samples=2)
    server = StandinServer()
    url = server.start()
    outcomes = {}
    try:
        for fast in (True, False):
            outdir = tmp_path / f"fast-{fast}"
            shutil.copytree(tmp_path / "before", outdir)
            server.requests = 0  # the stand-in numbers its answers
            monkeypatch.setattr(WorkList, "fast_skip", fast)
            cfg = GenerateConfig(
                prompts=prompts,
                output_dir=outdir,
                endpoints=[url],
                max_tokens=8,
                samples=2,
                concurrency=1,
                hedge=False,
                commit_interval_s=0.0,
                force=True,  # force: job.json is not part of the prior state
            )
            stats = generate(cfg, handle_signals=False)
            counters = {
                k: v for k, v in stats.to_dict().items() if k not in ("wall_s", "output_tokens_per_s", "warmup")
            }
            for r in counters["replicas"]:
                del r["output_tokens_per_s"]  # a rate over wall time
            outcomes[fast] = ((outdir / ERRORS).read_bytes(), (outdir / RESULTS).read_bytes(), counters)
    finally:
        server.stop()
    (fast_errors, fast_results, fast_counters), (full_errors, full_results, full_counters) = (
        outcomes[True],
        outcomes[False],
    )
    assert fast_errors == full_errors
    assert fast_counters == full_counters

    def without_timing(data: bytes) -> list[dict]:
        return [{k: v for k, v in orjson.loads(x).items() if k != "timing"} for x in data.splitlines()]

    assert without_timing(fast_results) == without_timing(full_results)  # new samples carry their own timing
    # The cases above happened: what the full path wrote is what the comments say.
    new_errors = [(e["line"], e["reason"].split(";")[0]) for e in read_jsonl(tmp_path / "fast-True" / ERRORS)[2:]]
    assert new_errors == [
        (1, "line 1: conversation must start with a user message after system messages, got 'assistant'"),
        (3, "line 3: duplicate id 'a' (first on line 2)"),
        (5, "line 5: duplicate id 'b' (first on line 4)"),
        (11, "line 11: `id` must be a non-empty string, got True"),
    ]
    new_results = sorted((r["id"], r["sample"]) for r in without_timing(fast_results)[9:])
    assert new_results == sorted(
        [(normalize(ROWS[6], 7).id, 0), (normalize(ROWS[6], 7).id, 1), ("e", 1), ("f", 0), ("f", 1)]
    )
    rows = full_counters["rows"]
    assert (rows["resumed"], rows["ok"], rows["input_errors"]) == (2 + 2 + 2 + 1 + 2, 5, 4)  # a, b, 7, e's 0, c
