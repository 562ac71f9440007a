"""The key index beside results.jsonl and the flat done set: the index path must read exactly what a full scan reads.

The full scan of results.jsonl (the index removed) is the reference: it is the path every resume
took before the index existed.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import orjson
import pytest

from fleetgen.generate.journal import keyindex
from fleetgen.generate.journal.directory import ERRORS, RESULTS, Journal
from fleetgen.generate.journal.keyindex import INDEX, read_index
from fleetgen.generate.journal.linekey import dumps_line
from fleetgen.generate.journal.loaddone import load_done
from fleetgen.generate.journal.torn import repair
from fleetgen.rows.doneset import DoneSet, id_hash

SRC = Path(__file__).resolve().parents[2] / "src"


def content(done: DoneSet) -> tuple[set, set, int]:
    """Everything a done set holds, comparable: (hash, sample bits) per id, wide samples, result count."""
    lo, hi, bits = done.occupied()
    return set(zip(lo.tolist(), hi.tolist(), bits.tolist())), set(done.wide), done.results


def reference(outdir: Path, tmp: Path) -> DoneSet:
    """The done set a full scan reads: the same results and errors, no index."""
    ref = tmp / f"ref-{time.monotonic_ns()}"
    ref.mkdir()
    for name in (RESULTS, ERRORS):
        if (outdir / name).exists():
            shutil.copy(outdir / name, ref / name)
    return load_done(ref)


def result_keys(outdir: Path) -> set[tuple[str, int]]:
    return {(r["id"], r["sample"]) for r in map(orjson.loads, (outdir / RESULTS).read_bytes().splitlines())}


def write_batches(outdir: Path, batches: list[list[tuple[str, int]]]) -> None:
    journal, _ = Journal.open(outdir, retry_errors=False)
    for batch in batches:
        journal.commit(
            [dumps_line({"id": rid, "sample": k, "messages": [], "pad": "x" * (k % 7)}) for rid, k in batch], []
        )
    journal.close()


def random_batches(rng: random.Random, n: int) -> list[list[tuple[str, int]]]:
    ids = [f"id-{i}" for i in range(40)] + ['we"ird\\id', "caf\u00e9", "tab\there"]
    return [
        [(rng.choice(ids), rng.choice([0, 1, 2, 5, 63, 64, 70])) for _ in range(rng.randint(1, 6))] for _ in range(n)
    ]


# --- the flat done set ---------------------------------------------------------------------------------


def test_flat_done_set_agrees_with_a_dict_through_growth_and_bulk_adds():
    rng = random.Random(11)
    done, ref = DoneSet(), set()
    for step in range(30):
        if step % 5 == 4:  # a bulk add, as the index load does, mixing new keys with known ones
            keys = [(f"r{rng.randrange(30000)}", rng.choice([0, 1, 3, 64, 99])) for _ in range(2000)]
            hs = [id_hash(r) for r, _ in keys]
            new = done.add_many(
                np.array([h & (2**64 - 1) for h in hs], dtype=np.uint64),
                np.array([h >> 64 for h in hs], dtype=np.uint64),
                np.array([k for _, k in keys]),
            )
            assert new == len(set(keys) - ref)
            ref |= set(keys)
        else:
            for _ in range(1500):
                key = (f"r{rng.randrange(30000)}", rng.choice([0, 1, 3, 64, 99]))
                assert done.add(*key) == (key not in ref)
                ref.add(key)
    assert done.nbytes > 24 * 4096  # it grew past the first table (4096 slots of 24 bytes)
    for i in range(30000):
        for k in (0, 1, 2, 3, 64, 99):
            assert ((f"r{i}", k) in done) == ((f"r{i}", k) in ref)
        assert done.has_all(f"r{i}", 2) == all((f"r{i}", k) in ref for k in (0, 1))


def _bulk(done: DoneSet, keys: list[tuple[str, int]]) -> int:
    hs = [id_hash(r) for r, _ in keys]
    return done.add_many(
        np.array([h & (2**64 - 1) for h in hs], dtype=np.uint64),
        np.array([h >> 64 for h in hs], dtype=np.uint64),
        np.array([k for _, k in keys]),
    )


def _slots(done: DoneSet) -> list[tuple[int, int, int]]:
    return sorted(zip(*(a.tolist() for a in done.occupied())))


def test_a_done_set_over_a_read_only_table_adds_beside_it_and_merges_to_the_same_table():
    """A resume's inserts over a mapped snapshot must not write the table (a write copies its page)."""
    rng = random.Random(12)
    key = lambda: (f"r{rng.randrange(6000)}", rng.choice([0, 1, 2, 64, 70]))  # noqa: E731
    base, ref = DoneSet(), set()
    for _ in range(3000):
        k = key()
        base.add(*k)
        ref.add(k)
    frozen = bytes(base.table)  # read-only: any write into it raises
    done = DoneSet.over(memoryview(frozen).cast("Q"), base.ids, set(base.wide), set(), base.results, base.errors)
    for step in range(12):
        if step % 3 == 2:  # the index frames after a snapshot: known keys and new ones
            keys = [key() for _ in range(500)]
            assert _bulk(done, keys) == len(set(keys) - ref)
            ref |= set(keys)
        else:
            for _ in range(400):
                k = key()
                assert done.add(*k) == (k not in ref)
                ref.add(k)
    assert bytes(memoryview(frozen)) == frozen and done.ids > base.ids  # the new ids went beside the table
    for i in range(6000):
        rid = f"r{i}"
        for s in (0, 1, 2, 3, 64, 70):
            assert ((rid, s) in done) == ((rid, s) in ref)
        for samples in (2, 3):  # e.g. sample 0 in the table, 1 in the tail
            assert done.has_all(rid, samples) == all((rid, s) in ref for s in range(samples))
    plain = DoneSet()
    _bulk(plain, sorted(ref))
    _ = done.table  # a snapshot wants the whole table: the tail merged in
    assert done.ids == plain.ids and _slots(done) == _slots(plain) and done.wide == plain.wide  # one table again


# --- the index on random kills, against the full scan ----------------------------------------------------

CHILD = textwrap.dedent(
    """
    import random, sys
    from pathlib import Path
    from fleetgen.generate.journal.directory import Journal
    from fleetgen.generate.journal.linekey import dumps_line
    outdir, seed = Path(sys.argv[1]), int(sys.argv[2])
    rng = random.Random(seed)
    journal, _ = Journal.open(outdir, retry_errors=False)
    print("open", flush=True)
    i = 0
    while True:
        i += 1
        lines = [dumps_line({"id": f"s{seed}-{i}-{j}" if j % 3 else f"shared-{rng.randrange(50)}",
                             "sample": rng.randrange(4), "messages": [], "pad": "y" * rng.randrange(3000)})
                 for j in range(rng.randint(1, 40))]
        journal.commit(lines, [])
    """
)


def test_index_reads_what_the_full_scan_reads_after_random_kill_9(tmp_path):
    outdir = tmp_path / "out"
    rng = random.Random(7)
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    for cycle in range(6):
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(outdir), str(cycle)], env=env, stdout=subprocess.PIPE
        )
        assert child.stdout.readline() == b"open\n"
        time.sleep(rng.uniform(0.05, 0.4))
        child.send_signal(signal.SIGKILL)
        child.wait()
        repair(outdir / RESULTS)  # what Journal.open does first
        loaded = read_index(outdir / INDEX)
        assert loaded is not None and keyindex.matches_results(loaded, outdir / RESULTS)
        assert loaded.end <= (outdir / RESULTS).stat().st_size  # never ahead of the results
        indexed = {(int(k["hi"]) << 64 | int(k["lo"]), int(k["sample"])) for k in loaded.keys}
        assert indexed <= {(id_hash(r), k) for r, k in result_keys(outdir)}  # claims only rows that are there
        assert content(load_done(outdir)) == content(reference(outdir, tmp_path))
        journal, done = Journal.open(outdir, retry_errors=False)  # levels the index, as a resume does
        journal.close()
        assert content(done) == content(reference(outdir, tmp_path))
        assert read_index(outdir / INDEX).end == (outdir / RESULTS).stat().st_size
    assert len(result_keys(outdir)) > 100


def test_a_kill_between_the_results_write_and_the_index_write(tmp_path):
    """The results batch is fsynced, the process dies before its frame: the resume finds those rows in the results."""
    outdir = tmp_path / "out"
    code = textwrap.dedent(
        """
        import os, sys
        from pathlib import Path
        from fleetgen.generate.journal.directory import Journal
        from fleetgen.generate.journal.linekey import dumps_line
        journal, _ = Journal.open(Path(sys.argv[1]), retry_errors=False)
        journal.commit([dumps_line({"id": "a", "sample": 0, "messages": []})], [])
        write = os.write  # the results go through Journal.os_write, bound before this; the index frame through os.write
        # dies before its frame
        os.write = lambda fd, data: os._exit(9) if bytes(data[:4]) == b"KF01" else write(fd, data)
        journal.commit([dumps_line({"id": "b", "sample": 1, "messages": []}), dumps_line({"id": "c", "sample": 0})], [])
        """
    )
    proc = subprocess.run([sys.executable, "-c", code, str(outdir)], env={**os.environ, "PYTHONPATH": str(SRC)})
    assert proc.returncode == 9
    assert read_index(outdir / INDEX).keys.size == 1  # only "a" reached the index
    journal, done = Journal.open(outdir, retry_errors=False)
    journal.close()
    assert ("a", 0) in done and ("b", 1) in done and ("c", 0) in done and done.results == 3
    assert read_index(outdir / INDEX).keys.size == 3  # and the index caught up


# --- torn, missing and stale indexes ---------------------------------------------------------------------


def test_a_torn_index_keeps_its_sound_frames_and_reads_the_rest_from_the_results(tmp_path):
    rng = random.Random(3)
    outdir = tmp_path / "out"
    write_batches(outdir, random_batches(rng, 30))
    whole = (outdir / INDEX).read_bytes()
    ref = content(reference(outdir, tmp_path))
    for cut in sorted(rng.sample(range(len(keyindex.HEADER), len(whole)), 25)) + [0, 3]:
        (outdir / INDEX).write_bytes(whole[:cut])
        assert content(load_done(outdir)) == ref
        loaded = read_index(outdir / INDEX)
        assert loaded is None or loaded.end <= (outdir / RESULTS).stat().st_size
        journal, done = Journal.open(outdir, retry_errors=False)
        journal.close()
        assert content(done) == ref
        assert read_index(outdir / INDEX).whole and read_index(outdir / INDEX).end == (outdir / RESULTS).stat().st_size
    garbage = bytearray(whole)
    garbage[len(keyindex.HEADER) + 40] ^= 0xFF  # a flipped byte inside the first frame's keys: its CRC fails
    (outdir / INDEX).write_bytes(bytes(garbage))
    assert read_index(outdir / INDEX).end == 0 and content(load_done(outdir)) == ref


def test_a_missing_frame_in_the_middle_stops_the_index_there(tmp_path):
    """Frames must be contiguous: later frames after a lost one are not trusted (they would hide its rows)."""
    outdir = tmp_path / "out"
    write_batches(outdir, [[("a", 0)], [("b", 0), ("b", 1)], [("c", 0)]])
    data = (outdir / INDEX).read_bytes()
    frame = keyindex.FRAME_HEAD
    first = len(keyindex.HEADER) + frame + 20
    second = first + frame + 40
    (outdir / INDEX).write_bytes(data[:first] + data[second:])  # drop the frame of b
    loaded = read_index(outdir / INDEX)
    assert loaded.keys.size == 1 and not loaded.whole
    done = load_done(outdir)
    assert ("b", 0) in done and ("b", 1) in done and ("c", 0) in done and done.results == 4


def test_a_missing_index_is_rebuilt_from_the_results(tmp_path):
    outdir = tmp_path / "out"
    write_batches(outdir, random_batches(random.Random(4), 20))
    ref = content(reference(outdir, tmp_path))
    whole = (outdir / INDEX).read_bytes()
    (outdir / INDEX).unlink()
    assert content(load_done(outdir)) == ref
    journal, done = Journal.open(outdir, retry_errors=False)
    journal.close()
    assert content(done) == ref
    rebuilt = read_index(outdir / INDEX)
    assert rebuilt.whole and rebuilt.end == len((outdir / RESULTS).read_bytes())
    assert sorted(rebuilt.keys.tolist()) == sorted(read_index_bytes(tmp_path, whole).keys.tolist())


def read_index_bytes(tmp: Path, data: bytes) -> keyindex.Loaded:
    p = tmp / "copy.keys"
    p.write_bytes(data)
    return read_index(p)


@pytest.mark.parametrize("how", ["other run's index", "results cut", "results replaced", "results deleted"])
def test_a_stale_index_is_dropped_and_rebuilt(tmp_path, how):
    rng = random.Random(5)
    a, b = tmp_path / "a", tmp_path / "b"
    write_batches(a, random_batches(rng, 15))
    write_batches(b, random_batches(rng, 25))
    if how == "other run's index":
        shutil.copy(a / INDEX, b / INDEX)
    elif how == "results cut":
        lines = (b / RESULTS).read_bytes().splitlines(keepends=True)
        (b / RESULTS).write_bytes(b"".join(lines[: len(lines) // 2]))
    elif how == "results replaced":  # same length, other rows: the recorded last line no longer matches
        data = (b / RESULTS).read_bytes()
        (b / RESULTS).write_bytes(data.replace(b'"id":"id-', b'"id":"ID-'))
    else:
        (b / RESULTS).unlink()
    assert not keyindex.matches_results(read_index(b / INDEX), b / RESULTS)
    ref = content(reference(b, tmp_path))
    assert content(load_done(b)) == ref
    journal, done = Journal.open(b, retry_errors=False)
    journal.close()
    assert content(done) == ref
    assert keyindex.matches_results(read_index(b / INDEX), b / RESULTS)


def test_an_index_write_failure_costs_the_index_not_the_run(tmp_path, monkeypatch, caplog):
    outdir = tmp_path / "out"
    journal, _ = Journal.open(outdir, retry_errors=False)
    journal.commit([dumps_line({"id": "a", "sample": 0})], [])
    real_write = os.write

    def fail_once(fd, data):
        if bytes(data[:4]) == b"KF01":  # a key index frame
            raise OSError(28, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", fail_once)
    journal.commit([dumps_line({"id": "b", "sample": 0})], [])
    monkeypatch.setattr(os, "write", real_write)
    journal.commit([dumps_line({"id": "c", "sample": 0})], [])  # no frame: it would follow a gap
    journal.close()
    assert "key index not updated" in caplog.text
    assert read_index(outdir / INDEX).keys.size == 1
    done = load_done(outdir)
    assert ("a", 0) in done and ("b", 0) in done and ("c", 0) in done and done.results == 3


def test_bulk_insert_wraps_past_the_table_end():
    """Keys whose home is the last slots probe past the end and wrap to slot 0; each is still found, once."""
    done = DoneSet()
    top = 2**12 - 1  # home slot of these keys in the smallest table
    lo = np.array([top] * 40 + [0, 1, 2] + [top - 1] * 5, dtype=np.uint64)
    hi = np.arange(len(lo), dtype=np.uint64) + 1
    assert done.add_many(lo, hi, np.zeros(len(lo), dtype=np.uint64)) == len(lo)
    for h_lo, h_hi in zip(lo.tolist(), hi.tolist()):
        assert not done.add_hash(h_hi << 64 | h_lo, 0)  # already there
        assert done.add_hash(h_hi << 64 | h_lo, 1)  # same slot, a new sample
    assert done.ids == len(lo) and done.pairs() == 2 * len(lo)


def test_chunked_rebuild_and_bulk_inserts_read_exactly_what_the_scan_reads(tmp_path, monkeypatch):
    """Small chunks, so a rebuild writes many frames and the done set takes many bulk inserts and grows."""
    import fleetgen.rows.doneset as doneset_mod

    monkeypatch.setattr(keyindex, "FRAME_KEYS", 7)
    monkeypatch.setattr(doneset_mod, "CHUNK", 11)
    rng = random.Random(8)
    outdir = tmp_path / "out"
    batches = [
        [(f"k{rng.randrange(9000)}", rng.choice([0, 1, 2, 64])) for _ in range(rng.randint(1, 60))] for _ in range(300)
    ]
    write_batches(outdir, batches)
    ref = content(reference(outdir, tmp_path))
    (outdir / INDEX).unlink()
    journal, done = Journal.open(outdir, retry_errors=False)
    journal.close()
    assert content(done) == ref and done.nbytes > 24 * 4096  # grew past the first table
    rebuilt = read_index(outdir / INDEX)
    assert rebuilt.whole and rebuilt.end == (outdir / RESULTS).stat().st_size  # every frame sound and contiguous
    whole = (outdir / INDEX).read_bytes()
    assert whole.count(b"KF01") > 100  # one frame per 7 keys
    for cut in rng.sample(range(len(whole)), 8):
        (outdir / INDEX).write_bytes(whole[:cut])
        assert content(load_done(outdir)) == ref


def test_the_keys_record_hands_the_commit_make_the_index_the_lines_would(tmp_path):
    """The writer passes each line's (id hash, sample) as `record`
    computed them; the frame equals one read from the lines."""
    from fleetgen.generate.journal.outcomes import Batch, Completed, record
    from fleetgen.generate.observe.stats import Stats

    ids = ["plain", 'quo"te', "ünï", "back\\slash", "p" * 300]
    indexes = []
    for with_keys in (True, False):
        outdir = tmp_path / str(with_keys)
        journal, done = Journal.open(outdir, retry_errors=False)
        batch = Batch()
        for k, rid in enumerate(ids):
            record(
                Completed(rid, k % 3, {"messages": [], "finish_reason": ["stop"]}, False, 1, 1), batch, done, Stats()
            )
        assert batch.hashes == [id_hash(rid) for rid in ids] and batch.samples == [k % 3 for k in range(len(ids))]
        journal.commit(batch.results, batch.errors, (batch.hashes, batch.samples) if with_keys else None)
        journal.close()
        indexes.append((outdir / INDEX).read_bytes())
    assert indexes[0] == indexes[1] and len(read_index(tmp_path / "True" / INDEX).keys) == len(ids)
