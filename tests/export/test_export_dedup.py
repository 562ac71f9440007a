"""Export's dedup keeps the first record of each (id, sample) across every results file, and only those.

The pairs seen live in generate's done set (bounded memory; measured in bench/export_dedup_memory.py),
not a Python set: the same pairs must come out, ids of any length or script, samples past 64 included.
"""

from __future__ import annotations

import orjson

from fleetgen.export.results import ReadCounts, iter_results


def _rec(rid, sample, tag):
    return {"id": rid, "sample": sample, "messages": [{"role": "assistant", "content": tag}]}


def _write(path, recs):
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))


def test_dedup_keeps_the_first_of_each_pair_across_files_and_drops_exactly_the_repeats(tmp_path):
    ids = ["a", "b", "é-ünï", "x" * 500, "", "0", "a#1"]
    main = [_rec(i, k, f"main {i} {k}") for i in ids for k in (0, 1, 70)]
    main += [_rec("a", 0, "repeat in the same file"), _rec("x" * 500, 70, "repeat of a wide sample")]
    shard = [_rec("b", 1, "repeat in a shard file"), _rec("b", 2, "new in a shard file"), _rec("é-ünï", 0, "repeat")]
    shard += [
        {"id": "c", "messages": [{"role": "assistant", "content": "no sample: sample 0"}]},
        _rec("c", 0, "repeat of it"),
    ]
    _write(tmp_path / "results.jsonl", main)
    _write(tmp_path / "results.shard-0-of-2.jsonl", shard)
    counts = ReadCounts()
    got = [(r["id"], r.get("sample", 0), r["messages"][0]["content"]) for r in iter_results(tmp_path, counts)]
    want = [(i, k, f"main {i} {k}") for i in ids for k in (0, 1, 70)] + [
        ("b", 2, "new in a shard file"),
        ("c", 0, "no sample: sample 0"),
    ]
    assert got == want  # the first of each pair, in file order
    assert counts.duplicates == 5 and counts.corrupt_lines == 0


def test_a_sample_that_is_not_a_non_negative_integer_is_a_corrupt_line_not_a_crash(tmp_path):
    _write(tmp_path / "results.jsonl", [_rec("a", "first", "x"), _rec("a", -1, "y"), _rec("a", 0, "z")])
    counts = ReadCounts()
    assert [r["messages"][0]["content"] for r in iter_results(tmp_path, counts)] == ["z"]
    assert counts.corrupt_lines == 2 and counts.duplicates == 0
