"""The journal: torn-tail repair, the done-set by (id, sample), job identity, retry-errors."""

from __future__ import annotations

import json

import orjson
import pytest

from fleetgen.errors import ResumeMismatchError
from fleetgen.generate.journal.directory import ERRORS, RESULTS, Journal
from fleetgen.generate.journal.identity import check_identity
from fleetgen.generate.journal.linekey import dumps_line
from fleetgen.generate.journal.loaddone import load_done
from fleetgen.generate.journal.outcomes import Batch, Completed, Failed, Skipped, record
from fleetgen.generate.journal.torn import repair
from fleetgen.generate.observe.stats import Stats


def line(rid, sample, **kw):
    return dumps_line({"id": rid, "sample": sample, **kw})


def test_repair_cuts_a_torn_last_line_and_keeps_whole_ones(tmp_path):
    p = tmp_path / RESULTS
    good = line("a", 0, x="y" * 100_000) + line("b", 1)
    p.write_bytes(good + b'{"id":"c","sample":0,"messa')
    assert repair(p) == len(b'{"id":"c","sample":0,"messa')
    assert p.read_bytes() == good
    assert repair(p) == 0


def test_repair_drops_a_newline_terminated_line_that_is_not_json(tmp_path):
    p = tmp_path / RESULTS
    good = line("a", 0)
    p.write_bytes(good + b"\x00\x00\x00\n")
    repair(p)
    assert p.read_bytes() == good
    p.write_bytes(b'{"id":"z"')
    repair(p)
    assert p.read_bytes() == b""


def test_done_set_reads_keys_by_id_including_escaped_ids_and_row_errors(tmp_path):
    (tmp_path / RESULTS).write_bytes(line('we"ird\\id', 2) + line("b", 0) + line("b", 0))
    (tmp_path / ERRORS).write_bytes(
        line("c", 1, reason="x") + dumps_line({"id": None, "sample": None, "line": 17, "reason": "bad"})
    )
    done = load_done(tmp_path)
    assert ('we"ird\\id', 2) in done and ("b", 0) in done and ("c", 1) in done
    assert ("b", 1) not in done and ("zz", 0) not in done
    assert done.bad_lines == {17}
    assert done.results == 2 and done.errors == 2


def test_done_set_reads_every_id_as_json_would(tmp_path):
    """Ids made of quotes, backslashes, escapes and non-ASCII: the scan's regex must read each exactly."""
    import random

    rng = random.Random(3)
    keys = {
        ("".join(rng.choice('a"\\\n\u00e9/') for _ in range(rng.randrange(6))), rng.randrange(12)) for _ in range(3000)
    }
    lines = [line(rid, k, messages=[{"content": 'x"y\\'}]) for rid, k in sorted(keys)]
    lines.insert(5, line(None, 0) + line("n", None))  # no key: not done
    (tmp_path / RESULTS).write_bytes(b"".join(lines))
    done = load_done(tmp_path)
    assert all(key in done for key in keys)
    ids = {rid for rid, _ in keys}
    assert not any((rid, k) in done for rid in ids | {"n", "zz"} for k in range(13) if (rid, k) not in keys)
    assert done.results == len(keys)


def test_identity_mismatch_is_refused_unless_forced(tmp_path):
    ident = {"prompts": {"sha256": "ab", "rows": 3}, "model": "m", "sampling": {"temperature": 0.7}}
    check_identity(tmp_path, ident, force=False)
    check_identity(tmp_path, ident, force=False)  # same job resumes
    other = {**ident, "sampling": {"temperature": 0.2}}
    with pytest.raises(ResumeMismatchError, match="sampling.temperature was 0.7, now 0.2"):
        check_identity(tmp_path, other, force=False)
    check_identity(tmp_path, other, force=True)
    assert json.loads((tmp_path / "job.json").read_text())["sampling"]["temperature"] == 0.2


def test_record_writes_each_pair_once_and_retry_errors_sets_errors_aside(tmp_path):
    journal, done = Journal.open(tmp_path, retry_errors=False)
    stats = Stats()
    batch = Batch()
    rec = {"messages": [], "finish_reason": ["stop"]}
    record(Completed("a", 0, rec, False, 3, 5), batch, done, stats)
    record(Completed("a", 0, rec, False, 3, 5), batch, done, stats)  # a duplicate never reaches the file
    record(Failed("a", 1, "HTTP 400: too long", "rejected", 4), batch, done, stats)
    record(Failed(None, None, "line 9: malformed JSON", "input", 9), batch, done, stats)
    record(Skipped("z", 0), batch, done, stats)
    journal.commit(batch.results, batch.errors)
    journal.close()
    assert stats.ok == 1 and stats.errors == 2 and stats.duplicates_dropped == 1 and stats.resumed == 1
    results = [orjson.loads(x) for x in (tmp_path / RESULTS).read_bytes().splitlines()]
    assert [(r["id"], r["sample"]) for r in results] == [("a", 0)]
    _, done2 = Journal.open(tmp_path, retry_errors=False)
    assert ("a", 1) in done2 and done2.bad_lines == {9}
    j3, done3 = Journal.open(tmp_path, retry_errors=True)
    j3.close()
    assert ("a", 1) not in done3 and ("a", 0) in done3
    assert (tmp_path / "errors.retried-1.jsonl").exists()
    assert not (tmp_path / ERRORS).read_bytes()
