"""The resume checkpoint (resume.ckpt): a resume that seeks past the watermark must do exactly what the full pass does.

The reference is the work list over the whole prompt file without a checkpoint (the path every resume
took before it existed). Runs are played in-process through the real Journal, `record` and the
real work list, with samples completing in random order and the run stopped ("killed") at a random
point; one test kills a real `generate()` process with SIGKILL. No engine is needed: these are
journal tests (the stand-in server, where a server is needed at all).
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

import orjson
import pytest
from helpers import assert_exactly_once, read_jsonl, write_prompts
from standin_server import StandinServer

from fleetgen.generate.config.partition import Shard
from fleetgen.generate.journal import checkpoint as watermark
from fleetgen.generate.journal import claimsfile, donefile
from fleetgen.generate.journal.checkpoint import CheckpointProgress, checkpoint_name, job_digest, read_checkpoint
from fleetgen.generate.journal.directory import Journal
from fleetgen.generate.journal.loaddone import load_done
from fleetgen.generate.journal.outcomes import Batch, Completed, Failed, record
from fleetgen.generate.observe.stats import Stats
from fleetgen.generate.prompts.reader import fingerprint
from fleetgen.generate.prompts.worklist import WorkList
from fleetgen.rows.doneset import id_hash
from fleetgen.rows.files import journal_names

SRC = Path(__file__).resolve().parents[2] / "src"


# --- playing runs in-process -----------------------------------------------------------------------------


def random_prompts(path: Path, rng: random.Random, n: int) -> Path:
    """Rows with repeated ids, bad rows, rows without ids, int ids, ShareGPT rows, blank lines."""
    lines = []
    for i in range(n):
        r = rng.random()
        rid = f"r{rng.randrange(max(4, n * 2 // 3))}"
        if r < 0.04:
            lines.append(b"")
        elif r < 0.08:
            lines.append(b'{"id": "x", oops')
        elif r < 0.14:
            lines.append(orjson.dumps({"id": rid, "messages": [{"role": "assistant", "content": "refused"}]}))
        elif r < 0.18:
            lines.append(orjson.dumps({"messages": [{"role": "user", "content": f"no id {rng.randrange(5)}"}]}))
        elif r < 0.22:
            lines.append(orjson.dumps({"id": rng.randrange(6), "messages": [{"role": "user", "content": "q"}]}))
        elif r < 0.26:
            lines.append(orjson.dumps({"id": rid, "conversations": [{"from": "human", "value": "q"}]}))
        else:
            lines.append(orjson.dumps({"id": rid, "messages": [{"role": "user", "content": f"q {i}"}]}))
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def rows_of(prompts: Path) -> int:
    return fingerprint(prompts)[1]


def last_row(prompts: Path) -> int:
    """The last line that is not blank (blank lines are no rows: the watermark need not pass them)."""
    return max(n for n, raw in enumerate(prompts.read_bytes().splitlines(), 1) if raw.strip())


def digest(prompts: Path, samples: int, shard: Shard, outdir: Path) -> bytes:
    """The job digest: from the job.json a real run wrote, else (runs played here) from the prompt file alone."""
    job = outdir / "job.json"
    identity = orjson.loads(job.read_bytes()) if job.exists() else {"prompts": {"sha256": fingerprint(prompts)[0]}}
    return job_digest(identity, samples, (shard.index, shard.count))


def open_progress(
    outdir: Path, prompts: Path, samples: int, shard: Shard, done, journal: Journal
) -> CheckpointProgress:
    paths = tuple(outdir / n for n in journal_names(shard.suffix)[:2])
    return CheckpointProgress.open(
        outdir, shard.suffix, digest(prompts, samples, shard, outdir), done, samples, paths, lambda: journal.ends
    )


def make_loop(prompts: Path, done, samples: int, shard: Shard, progress: CheckpointProgress | None) -> WorkList:
    return WorkList(prompts, samples, done, Stats(total=rows_of(prompts) * samples), shard=shard, progress=progress)


def play(
    prompts: Path,
    outdir: Path,
    samples: int,
    shard: Shard,
    rng: random.Random,
    *,
    steps: int | None,
    retry_errors: bool = False,
    check=None,
    lose_last_frame: bool = False,
    snapshots: float = 0.0,
    graceful: bool = False,
) -> None:
    """One run: items taken a few at a time, completed in random order, committed in batches; stopped after `steps`.

    steps None: run to the end and close the checkpoint as the runner does (and save the done-set
    snapshot). Otherwise the run is killed there: no last frame. lose_last_frame: the last commit's
    frame is not written either (a kill between the journal's fsync and the checkpoint's write).
    snapshots: the chance that a commit also writes the done-set snapshot (the journal's timer, drawn).
    graceful: stopped at `steps` as an interrupted generate() stops (Ctrl-C): the writer ends, the
    checkpoint closes (its last frame and the claims snapshot) and the done-set snapshot is saved.
    """
    journal, done = Journal.open(outdir, retry_errors=retry_errors, suffix=shard.suffix)
    journal.snapshot_due = lambda: rng.random() < snapshots
    progress = open_progress(outdir, prompts, samples, shard, done, journal)
    loop = make_loop(prompts, done, samples, shard, progress)
    work, inflight, exhausted, step = iter(loop), [], False, 0
    while steps is None or step < steps:
        step += 1
        for _ in range(0 if exhausted else rng.randint(0, 5)):
            item = next(work, None)
            if item is None:
                exhausted = True
                break
            inflight.append(item)
        if exhausted and not inflight:
            break
        rng.shuffle(inflight)
        k = rng.randint(0, len(inflight))
        chosen, inflight = inflight[:k], inflight[k:]
        batch = Batch()
        for item in chosen:
            if isinstance(item, Failed):
                record(item, batch, done, loop.stats)
            else:
                prompt, sample = item
                outcome = (
                    Failed(prompt.id, sample, "stand-in failure", "failed", prompt.line)
                    if rng.random() < 0.15
                    else Completed(prompt.id, sample, {"messages": []}, False, 1, 1)
                )
                record(outcome, batch, done, loop.stats)
        if batch:
            journal.commit(batch.results, batch.errors)
            if not (lose_last_frame and steps is not None and step == steps):
                progress.advance()
            if check is not None:
                check()
    if steps is None or graceful:
        progress.close()
        journal.save_done(if_changed=True)  # what the run loop does after a run's writer ended without an error
    else:
        progress.release()  # killed: no last frame, nothing more is written
    journal.close()


def resume_view(prompts: Path, outdir: Path, samples: int, shard: Shard, tmp: Path, *, checkpoint: bool):
    """What a resume's work list does, on a copy of the output: items, counters, samples in flight, start line."""
    copy = tmp / f"view-{time.monotonic_ns()}"
    shutil.copytree(outdir, copy)
    if not checkpoint:  # the reference: the full pass, the done set read from the journal (no snapshot)
        (copy / checkpoint_name(shard.suffix)).unlink(missing_ok=True)
        (copy / donefile.snapshot_name(shard.suffix)).unlink(missing_ok=True)
    journal, done = Journal.open(copy, retry_errors=False, suffix=shard.suffix)
    progress = open_progress(copy, prompts, samples, shard, done, journal) if checkpoint else None
    loop = make_loop(prompts, done, samples, shard, progress)
    items = [(i[0].id, i[0].line, i[0].messages, i[1]) if isinstance(i, tuple) else i for i in iter(loop)]
    journal.close()
    start = progress.start.line if progress is not None and progress.start is not None else 1
    shutil.rmtree(copy)
    return (items, loop.stats.resumed, loop.next_resumed, loop.remaining), start


def frames_end(outdir: Path, prompts: Path, samples: int, shard: Shard) -> int:
    loaded = read_checkpoint(outdir / checkpoint_name(shard.suffix), digest(prompts, samples, shard, outdir))
    return loaded.fields[2] if loaded is not None and loaded.fields is not None else 1


def done_content(done) -> tuple:
    """Everything a done set holds, whatever its table's size or layout: slots, wide samples, row errors, counts."""
    lo, hi, bits = done.occupied()
    return (
        set(zip(lo.tolist(), hi.tolist(), bits.tolist())),
        set(done.wide),
        set(done.bad_lines),
        done.results,
        done.errors,
    )


def scanned_done(outdir: Path, shard: Shard, tmp: Path) -> tuple:
    """The done set a scan of the results and errors alone reads (no key index, no snapshot)."""
    ref = tmp / f"ref-{time.monotonic_ns()}"
    ref.mkdir()
    for name in journal_names(shard.suffix)[:2]:
        if (outdir / name).exists():
            shutil.copy(outdir / name, ref / name)
    content = done_content(load_done(ref, suffix=shard.suffix))
    shutil.rmtree(ref)
    return content


def opened_done(outdir: Path, shard: Shard, tmp: Path) -> tuple[tuple, bool]:
    """What Journal.open reads on a copy of the output, and whether it took the done-set snapshot."""
    copy = tmp / f"open-{time.monotonic_ns()}"
    shutil.copytree(outdir, copy)
    names = journal_names(shard.suffix)
    used = donefile.load(copy / donefile.snapshot_name(shard.suffix), copy / names[0], copy / names[1], copy / names[2])
    journal, done = Journal.open(copy, retry_errors=False, suffix=shard.suffix)
    content = done_content(done)
    journal.close()
    shutil.rmtree(copy)
    return content, used is not None


def damage(path: Path, rng: random.Random) -> str:
    """Tear the file at a random byte, or flip one random bit; returns which."""
    data = bytearray(path.read_bytes())
    if rng.random() < 0.5:
        path.write_bytes(bytes(data[: rng.randrange(len(data))]))
        return "torn"
    data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    path.write_bytes(bytes(data))
    return "flipped"


# --- exactness on random kills --------------------------------------------------------------------------


def test_resume_from_the_checkpoint_equals_the_full_pass_after_random_kills(tmp_path):
    """Random prompt files, samples 1-3, whole job or a shard; each run killed at a random point, then resumed twice."""
    rng = random.Random(19)
    seeks = 0
    for case in range(60):
        prompts = random_prompts(tmp_path / f"p{case}.jsonl", rng, rng.randint(5, 60))
        samples, shard = rng.choice([1, 1, 2, 3]), rng.choice([Shard(), Shard(), Shard(0, 2), Shard(1, 3)])
        outdir = tmp_path / f"out{case}"
        for cycle in range(rng.randint(1, 4)):
            play(prompts, outdir, samples, shard, rng, steps=rng.randint(1, 25), lose_last_frame=rng.random() < 0.3)
            with_ckpt, start = resume_view(prompts, outdir, samples, shard, tmp_path, checkpoint=True)
            full, _ = resume_view(prompts, outdir, samples, shard, tmp_path, checkpoint=False)
            assert with_ckpt == full, f"case {case} cycle {cycle}: {prompts.read_text()}"
            seeks += start > 1
        play(prompts, outdir, samples, shard, rng, steps=None)  # the last run finishes
        with_ckpt, start = resume_view(prompts, outdir, samples, shard, tmp_path, checkpoint=True)
        assert with_ckpt == resume_view(prompts, outdir, samples, shard, tmp_path, checkpoint=False)[0]
        assert (
            with_ckpt[0] == [] and start == last_row(prompts) + 1
        )  # a finished run's checkpoint covers every row (blank ones aside)
    assert seeks > 50  # the resumes did start past the beginning


def test_resume_with_done_set_snapshots_equals_the_full_pass_after_random_kills(tmp_path):
    """Snapshots at random commits, runs killed at random points, snapshots torn or bit-flipped at random:
    Journal.open reads exactly the done set a scan of the journal reads, and the resume does what the full pass does."""
    rng = random.Random(31)
    used = damaged = 0
    for case in range(40):
        prompts = random_prompts(tmp_path / f"p{case}.jsonl", rng, rng.randint(5, 60))
        samples, shard = rng.choice([1, 2, 3, 70]), rng.choice([Shard(), Shard(), Shard(1, 2)])
        outdir = tmp_path / f"out{case}"
        snap = outdir / donefile.snapshot_name(shard.suffix)
        for cycle in range(rng.randint(1, 4)):
            play(
                prompts,
                outdir,
                samples,
                shard,
                rng,
                steps=rng.randint(1, 25),
                lose_last_frame=rng.random() < 0.3,
                snapshots=rng.choice([0.1, 0.5, 1.0]),
            )
            how = damage(snap, rng) if snap.exists() and rng.random() < 0.3 else None
            content, took = opened_done(outdir, shard, tmp_path)
            assert content == scanned_done(outdir, shard, tmp_path), f"case {case} cycle {cycle} ({how})"
            assert not (took and how), f"case {case} cycle {cycle}: a {how} snapshot was used"
            used += took
            damaged += how is not None
            with_snap, _ = resume_view(prompts, outdir, samples, shard, tmp_path, checkpoint=True)
            assert with_snap == resume_view(prompts, outdir, samples, shard, tmp_path, checkpoint=False)[0]
        play(prompts, outdir, samples, shard, rng, steps=None)
        content, took = opened_done(outdir, shard, tmp_path)
        assert took and content == scanned_done(outdir, shard, tmp_path)  # a finished run leaves a sound snapshot
    assert used > 30 and damaged > 10


def _cut_checkpoint_back(path: Path, rng: random.Random) -> None:
    """Keep the header and a random number of whole frames (a
    checkpoint whose watermark is behind the claims snapshot's)."""
    path.write_bytes(path.read_bytes()[: rng.choice(watermark.frame_ends(path))])


def test_resume_with_a_claims_snapshot_equals_the_full_pass(tmp_path):
    """Runs killed or stopped gracefully (which writes the sorted claims) at random; the checkpoint then cut back
    behind the snapshot, or the snapshot torn or bit-flipped: the resume does what the full pass does."""
    rng = random.Random(37)
    behind = ahead = 0
    for case in range(50):
        prompts = random_prompts(tmp_path / f"p{case}.jsonl", rng, rng.randint(5, 60))
        samples, shard = rng.choice([1, 1, 2, 3]), rng.choice([Shard(), Shard(), Shard(0, 2), Shard(1, 3)])
        outdir = tmp_path / f"out{case}"
        claims, ckpt = outdir / claimsfile.claims_name(shard.suffix), outdir / checkpoint_name(shard.suffix)
        for cycle in range(rng.randint(2, 5)):
            play(
                prompts,
                outdir,
                samples,
                shard,
                rng,
                steps=rng.randint(1, 25),
                graceful=rng.random() < 0.6,
                lose_last_frame=rng.random() < 0.2,
            )
            how = None
            if claims.exists() and rng.random() < 0.2:
                how = damage(claims, rng)
                assert claimsfile.load(claims, digest(prompts, samples, shard, outdir)) is None, how
            elif ckpt.exists() and rng.random() < 0.4:
                _cut_checkpoint_back(ckpt, rng)
            with_ckpt, start = resume_view(prompts, outdir, samples, shard, tmp_path, checkpoint=True)
            full, _ = resume_view(prompts, outdir, samples, shard, tmp_path, checkpoint=False)
            assert with_ckpt == full, f"case {case} cycle {cycle} ({how}): {prompts.read_text()}"
            snap = claimsfile.load(claims, digest(prompts, samples, shard, outdir))
            if snap is not None and start > 1:
                behind += start < snap.line
                ahead += start > snap.line
    assert behind > 10 and ahead > 3  # resumes used snapshots taken past their watermark, and before it


def test_a_torn_or_flipped_claims_snapshot_is_never_used(tmp_path):
    rng = random.Random(41)
    prompts, outdir = random_prompts(tmp_path / "p.jsonl", rng, 60), tmp_path / "out"
    play(prompts, outdir, 1, Shard(), rng, steps=None)
    claims, ckpt = outdir / claimsfile.claims_name(), outdir / checkpoint_name()
    data, key = claims.read_bytes(), digest(prompts, 1, Shard(), outdir)
    n = (len(data) - 4096) // 20
    assert n > 10 and claimsfile.load(claims, key) is not None
    _cut_checkpoint_back(ckpt, random.Random(2))  # a resume that would look the claims up
    full = resume_view(prompts, outdir, 1, Shard(), tmp_path, checkpoint=False)[0]
    spots = [
        3,
        20,
        60,
        1000,
        4095,
        4096 + 3,
        4096 + 8 * n + 2,
        4096 + 16 * n + 1,
        len(data) - 1,
    ]  # header, lo, hi, line
    for at in spots:
        flipped = bytearray(data)
        flipped[at] ^= 0x04
        claims.write_bytes(bytes(flipped))
        assert claimsfile.load(claims, key) is None, f"flipped byte {at}"
        assert resume_view(prompts, outdir, 1, Shard(), tmp_path, checkpoint=True)[0] == full
    for cut in rng.sample(range(len(data)), 10):
        claims.write_bytes(data[:cut])
        assert claimsfile.load(claims, key) is None, f"cut at {cut}"
    claims.write_bytes(data)
    assert claimsfile.load(claims, key) is not None and claimsfile.load(claims, bytes(32)) is None  # another job's


def test_the_watermark_never_passes_a_row_that_is_not_on_disk(tmp_path):
    """After every commit: the rows before the checkpoint's line,
    read in full against the journal on disk, need nothing."""
    rng = random.Random(23)
    for case in range(25):
        prompts = random_prompts(tmp_path / f"p{case}.jsonl", rng, rng.randint(10, 50))
        samples, shard = rng.choice([1, 2]), rng.choice([Shard(), Shard(1, 2)])
        outdir = tmp_path / f"out{case}"
        lines = prompts.read_bytes().splitlines(keepends=True)

        def check(outdir=outdir, prompts=prompts, samples=samples, shard=shard, lines=lines, case=case) -> None:
            end = frames_end(outdir, prompts, samples, shard)
            head = tmp_path / "head.jsonl"
            head.write_bytes(b"".join(lines[: end - 1]))
            copy = tmp_path / f"disk-{time.monotonic_ns()}"
            shutil.copytree(outdir, copy)
            journal, done = Journal.open(copy, retry_errors=False, suffix=shard.suffix)
            journal.close()
            loop = make_loop(head, done, samples, shard, None)
            assert list(iter(loop)) == [], f"case {case}: rows before line {end} are not all on disk"
            loaded = read_checkpoint(outdir / checkpoint_name(shard.suffix), digest(prompts, samples, shard, outdir))
            assert loaded is None or loaded.fields is None or loaded.fields[4] == loop.stats.resumed  # the count
            shutil.rmtree(copy)

        play(prompts, outdir, samples, shard, rng, steps=rng.randint(5, 40), check=check)


def test_a_kill_between_the_journal_write_and_the_checkpoint_write(tmp_path):
    """A real process dies right after a commit's fsync, before that commit's frame: the resume is still exact."""
    prompts = write_prompts(tmp_path / "p.jsonl", 30)
    outdir = tmp_path / "out"
    code = textwrap.dedent(
        """
        import os, sys
        from pathlib import Path
        sys.path.insert(0, sys.argv[3])
        import test_generate_watermark as t
        from fleetgen.generate.journal import checkpoint as watermark
        from fleetgen.generate.config.partition import Shard
        import random
        calls = []
        real = watermark.CheckpointProgress.advance
        def advance(self):
            calls.append(1)
            if len(calls) == 4:
                os._exit(9)  # the journal's fsync is done, the frame is not written
            real(self)
        watermark.CheckpointProgress.advance = advance
        t.play(Path(sys.argv[1]), Path(sys.argv[2]), 2, Shard(), random.Random(1), steps=None)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    proc = subprocess.run([sys.executable, "-c", code, str(prompts), str(outdir), str(Path(__file__).parent)], env=env)
    assert proc.returncode == 9
    on_disk = {
        (r["id"], r["sample"]) for r in read_jsonl(outdir / "results.jsonl") + read_jsonl(outdir / "errors.jsonl")
    }
    assert on_disk  # the fourth commit's rows are there, its frame is not
    with_ckpt, start = resume_view(prompts, outdir, 2, Shard(), tmp_path, checkpoint=True)
    assert start > 1
    assert with_ckpt == resume_view(prompts, outdir, 2, Shard(), tmp_path, checkpoint=False)[0]
    assert {(i[0], i[3]) for i in with_ckpt[0]} == {(f"p{i}", k) for i in range(30) for k in range(2)} - on_disk


# --- torn, missing, stale ---------------------------------------------------------------------------------


def _played(tmp_path: Path, seed: int = 3, samples: int = 2) -> tuple[Path, Path, random.Random]:
    rng = random.Random(seed)
    prompts = random_prompts(tmp_path / "p.jsonl", rng, 60)
    outdir = tmp_path / "out"
    for _ in range(3):
        play(prompts, outdir, samples, Shard(), rng, steps=rng.randint(8, 20))
    return prompts, outdir, rng


def test_a_torn_checkpoint_keeps_its_sound_frames(tmp_path):
    prompts, outdir, rng = _played(tmp_path)
    ckpt = outdir / checkpoint_name()
    data = ckpt.read_bytes()
    full = resume_view(prompts, outdir, 2, Shard(), tmp_path, checkpoint=False)[0]
    whole_start = frames_end(outdir, prompts, 2, Shard())
    starts = set()
    for cut in sorted(rng.sample(range(len(data)), 25)):
        ckpt.write_bytes(data[:cut])
        with_ckpt, start = resume_view(prompts, outdir, 2, Shard(), tmp_path, checkpoint=True)
        assert with_ckpt == full, f"cut at {cut}"
        assert start <= whole_start
        starts.add(start)
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0x40
    ckpt.write_bytes(bytes(flipped))
    with_ckpt, start = resume_view(prompts, outdir, 2, Shard(), tmp_path, checkpoint=True)
    assert with_ckpt == full and start < whole_start
    assert len(starts) > 2  # cuts at different frames resumed from different watermarks


def test_a_resume_cuts_a_torn_tail_and_goes_on_appending(tmp_path):
    prompts, outdir, rng = _played(tmp_path)
    ckpt = outdir / checkpoint_name()
    ckpt.write_bytes(ckpt.read_bytes()[:-7])
    play(prompts, outdir, 2, Shard(), rng, steps=None)
    loaded = read_checkpoint(ckpt, digest(prompts, 2, Shard(), outdir))
    assert loaded.whole and loaded.fields[2] == last_row(prompts) + 1


def test_a_missing_checkpoint_means_the_full_pass_and_a_new_checkpoint(tmp_path):
    prompts, outdir, rng = _played(tmp_path)
    full = resume_view(prompts, outdir, 2, Shard(), tmp_path, checkpoint=False)[0]
    (outdir / checkpoint_name()).unlink()
    with_ckpt, start = resume_view(prompts, outdir, 2, Shard(), tmp_path, checkpoint=True)
    assert with_ckpt == full and start == 1
    play(prompts, outdir, 2, Shard(), rng, steps=None)
    assert frames_end(outdir, prompts, 2, Shard()) == last_row(prompts) + 1


def _cut_results(outdir: Path) -> None:
    data = (outdir / "results.jsonl").read_bytes()
    (outdir / "results.jsonl").write_bytes(data[: data.rindex(b"\n", 0, len(data) - 1) + 1])  # one line fewer


def _replace_results_tail(outdir: Path) -> None:
    lines = (outdir / "results.jsonl").read_bytes().splitlines(keepends=True)
    lines[-1] = lines[-1].replace(b'"sample":', b'"sample": ', 1)  # same length + 1: another last line
    (outdir / "results.jsonl").write_bytes(b"".join(lines))


def _archive_errors(outdir: Path) -> None:
    Journal.open(outdir, retry_errors=True)[0].close()  # what --retry-errors does


def _samples_changed(outdir: Path) -> None:
    pass  # the resume below asks for another number of samples


@pytest.mark.parametrize("how", [_cut_results, _replace_results_tail, _archive_errors, _samples_changed])
def test_a_stale_checkpoint_is_ignored(tmp_path, how):
    prompts, outdir, _ = _played(tmp_path)
    assert read_jsonl(outdir / "errors.jsonl")  # the runs left errors, for --retry-errors to set aside
    samples = 3 if how is _samples_changed else 2
    how(outdir)
    with_ckpt, start = resume_view(prompts, outdir, samples, Shard(), tmp_path, checkpoint=True)
    assert start == 1
    assert with_ckpt == resume_view(prompts, outdir, samples, Shard(), tmp_path, checkpoint=False)[0]


def _drop_index(outdir: Path) -> None:
    (outdir / "results.keys").unlink()


def _rewrite_index(outdir: Path) -> None:
    (outdir / "results.keys").unlink()
    Journal.open(outdir, retry_errors=False)[0].close()  # rebuilt from the results: other frame boundaries


def _more_after_the_snapshot(outdir: Path) -> None:
    pass  # the runs after the snapshot (below) add results and errors past its ends: it stays true of a prefix


def _cut_past_the_snapshot(outdir: Path) -> None:
    _cut_results(outdir)  # a line the snapshot does not hold, but the key index after it does: that part is stale


@pytest.mark.parametrize(
    "how",
    [
        _cut_results,
        _replace_results_tail,
        _archive_errors,
        _drop_index,
        _rewrite_index,
        _more_after_the_snapshot,
        _cut_past_the_snapshot,
    ],
)
def test_a_stale_done_set_snapshot_is_ignored_and_a_prefix_one_used(tmp_path, how):
    rng = random.Random(7)
    prompts, outdir = random_prompts(tmp_path / "p.jsonl", rng, 60), tmp_path / "out"
    play(
        prompts, outdir, 2, Shard(), rng, steps=8, snapshots=1.0
    )  # a snapshot after every commit: of the whole journal
    prefix = how in (_more_after_the_snapshot, _cut_past_the_snapshot)
    if prefix:
        play(prompts, outdir, 2, Shard(), rng, steps=8)  # more commits, no snapshot: it now holds a prefix
    assert read_jsonl(outdir / "errors.jsonl")
    how(outdir)
    content, took = opened_done(outdir, Shard(), tmp_path)
    assert took == prefix  # the snapshot itself is still true of a prefix (took: it passed its own checks)
    assert content == scanned_done(outdir, Shard(), tmp_path)
    with_snap, _ = resume_view(prompts, outdir, 2, Shard(), tmp_path, checkpoint=True)
    assert with_snap == resume_view(prompts, outdir, 2, Shard(), tmp_path, checkpoint=False)[0]


def test_a_torn_or_flipped_done_set_snapshot_is_never_used(tmp_path):
    rng = random.Random(11)
    prompts, outdir = random_prompts(tmp_path / "p.jsonl", rng, 12), tmp_path / "out"
    play(prompts, outdir, 70, Shard(), rng, steps=None)  # 70 samples: the wide set is in it too
    snap = outdir / donefile.snapshot_name()
    data = snap.read_bytes()
    table_end = 4096 + 24 * (1 << 12)
    assert len(data) > table_end + 8 + 20  # row errors and samples >= 64 are in it
    reference = scanned_done(outdir, Shard(), tmp_path)
    assert opened_done(outdir, Shard(), tmp_path) == (reference, True)
    for cut in sorted(rng.sample(range(len(data)), 25)):
        snap.write_bytes(data[:cut])
        assert opened_done(outdir, Shard(), tmp_path) == (reference, False), f"cut at {cut}"
    for at in [
        9,
        40,
        4100,
        rng.randrange(4096, table_end),
        table_end + 3,
        len(data) - 1,
    ]:  # header, table, row errors, wide
        flipped = bytearray(data)
        flipped[at] ^= 0x10
        snap.write_bytes(bytes(flipped))
        assert opened_done(outdir, Shard(), tmp_path) == (reference, False), f"flipped byte {at}"


def test_an_edited_prompt_file_makes_the_checkpoint_stale(tmp_path):
    """The job's digest holds the prompt file's sha256: one changed byte and the checkpoint belongs to another file."""
    prompts, outdir, _ = _played(tmp_path)
    assert frames_end(outdir, prompts, 2, Shard()) > 1
    lines = prompts.read_bytes().splitlines(keepends=True)
    lines.insert(
        2, orjson.dumps({"id": "r0", "messages": [{"role": "user", "content": "new"}]}) + b"\n"
    )  # shifts every line
    prompts.write_bytes(b"".join(lines))
    with_ckpt, start = resume_view(prompts, outdir, 2, Shard(), tmp_path, checkpoint=True)
    assert start == 1
    assert with_ckpt == resume_view(prompts, outdir, 2, Shard(), tmp_path, checkpoint=False)[0]


def test_a_checkpoint_write_failure_costs_the_checkpoint_not_the_run(tmp_path, monkeypatch, caplog):
    rng = random.Random(5)
    prompts, outdir = random_prompts(tmp_path / "p.jsonl", rng, 60), tmp_path / "out"
    play(prompts, outdir, 2, Shard(), rng, steps=6)
    before = frames_end(outdir, prompts, 2, Shard())
    assert 1 < before < last_row(prompts)
    real_write = os.write

    def failing(fd, data):
        if data[:4] == b"CP01":
            return real_write(fd, data[: len(data) // 2])  # a short write: a torn frame
        return real_write(fd, data)

    monkeypatch.setattr(watermark.os, "write", failing)
    play(prompts, outdir, 2, Shard(), rng, steps=None)
    monkeypatch.undo()
    assert "resume checkpoint" in caplog.text
    assert frames_end(outdir, prompts, 2, Shard()) == before  # the torn frame and nothing after it
    with_ckpt, _ = resume_view(prompts, outdir, 2, Shard(), tmp_path, checkpoint=True)
    assert with_ckpt == resume_view(prompts, outdir, 2, Shard(), tmp_path, checkpoint=False)[0] and with_ckpt[0] == []


# --- end to end: generate() killed with SIGKILL, on the stand-in server -----------------------------------

CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from fleetgen.generate import GenerateConfig, generate
    from fleetgen.generate.journal.directory import Journal
    Journal.snapshot_every_s = 0.0  # a done-set snapshot after (nearly) every commit, so kills meet them too
    prompts, outdir, url = sys.argv[1:4]
    cfg = GenerateConfig(prompts=Path(prompts), output_dir=Path(outdir), endpoints=[url], max_tokens=4, samples=2,
                         concurrency=16, hedge=False)
    generate(cfg, handle_signals=False)
    """
)


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def test_generate_killed_at_random_resumes_from_the_checkpoint_exactly_once(tmp_path):
    rng = random.Random(29)
    prompts = tmp_path / "p.jsonl"
    write_prompts(prompts, 400)
    with open(
        prompts, "ab"
    ) as f:  # a duplicate id and a bad row, late in the file, so resumes meet them past the watermark
        f.write(orjson.dumps({"id": "p3", "messages": [{"role": "user", "content": "again"}]}) + b"\n")
        f.write(b'{"id": oops\n')
    outdir = tmp_path / "out"
    server = StandinServer(delay_per_token_s=0.02)
    url = server.start()
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    starts, snapshots_used = [], 0
    try:
        for _ in range(5):
            child = subprocess.Popen(
                [sys.executable, "-c", CHILD, str(prompts), str(outdir), url],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            # Killed once it wrote a random number of new rows, however fast the machine: a kill at a fixed
            # time met a run that had committed nothing yet on a loaded machine.
            target = _lines(outdir / "results.jsonl") + rng.randint(40, 160)
            deadline = time.monotonic() + 300
            while _lines(outdir / "results.jsonl") < target and child.poll() is None and time.monotonic() < deadline:
                time.sleep(0.01)
            child.send_signal(signal.SIGKILL)
            child.wait()
            if (outdir / "results.jsonl").exists():
                with_ckpt, start = resume_view(prompts, outdir, 2, Shard(), tmp_path, checkpoint=True)
                assert with_ckpt == resume_view(prompts, outdir, 2, Shard(), tmp_path, checkpoint=False)[0]
                starts.append(start)
                content, took = opened_done(outdir, Shard(), tmp_path)
                assert content == scanned_done(outdir, Shard(), tmp_path)
                snapshots_used += took
        subprocess.run(
            [sys.executable, "-c", CHILD, str(prompts), str(outdir), url],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    finally:
        server.stop()
    results, _ = assert_exactly_once(outdir, [f"p{i}" for i in range(400)], 2)
    row_errors = [e["line"] for e in read_jsonl(outdir / "errors.jsonl") if e["sample"] is None]
    assert sorted(row_errors) == [401, 402]  # recorded once each, whatever resume met them
    assert any(s > 1 for s in starts)  # some resume did seek past a watermark
    assert snapshots_used  # and some read the done set from a snapshot a killed run left
    assert frames_end(outdir, prompts, 2, Shard()) == 403
    assert {(id_hash(r["id"]), r["sample"]) for r in results} == {
        (id_hash(f"p{i}"), k) for i in range(400) for k in range(2)
    }


def test_a_commit_that_fails_writes_no_frame_for_its_rows(tmp_path, monkeypatch):
    """The disk fills during a commit: the batch is cut back, and no frame may claim its rows (the writer's order)."""
    import errno

    prompts = write_prompts(tmp_path / "p.jsonl", 120)
    outdir = tmp_path / "out"
    writes = []
    real = Journal.os_write

    def filling(fd, data):
        writes.append(len(data))
        if len(writes) >= 5:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data)

    monkeypatch.setattr(Journal, "os_write", staticmethod(filling))
    server = StandinServer(delay_per_token_s=0.005)
    url = server.start()
    try:
        from fleetgen.errors import OutputError
        from fleetgen.generate import GenerateConfig, generate

        cfg = GenerateConfig(
            prompts=prompts,
            output_dir=outdir,
            endpoints=[url],
            max_tokens=4,
            samples=2,
            concurrency=4,
            hedge=False,
            commit_interval_s=0.01,
        )
        with pytest.raises(OutputError):
            generate(cfg, handle_signals=False)
    finally:
        server.stop()
        monkeypatch.undo()
    with_ckpt, start = resume_view(prompts, outdir, 2, Shard(), tmp_path, checkpoint=True)
    assert start > 1  # commits before the failure moved the watermark
    assert with_ckpt == resume_view(prompts, outdir, 2, Shard(), tmp_path, checkpoint=False)[0]


def test_a_parquet_prompt_file_is_read_whole_and_leaves_no_checkpoint(tmp_path):
    """Parquet has no line offsets to seek to: the work list reads every row, as before the checkpoint."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from fleetgen.generate import GenerateConfig, generate

    prompts = tmp_path / "p.parquet"
    pq.write_table(
        pa.Table.from_pylist([{"id": f"q{i}", "messages": [{"role": "user", "content": f"q {i}"}]} for i in range(12)]),
        prompts,
    )
    server = StandinServer()
    url = server.start()
    try:
        cfg = GenerateConfig(
            prompts=prompts, output_dir=tmp_path / "out", endpoints=[url], max_tokens=4, samples=2, hedge=False
        )
        first = generate(cfg, handle_signals=False)
        (tmp_path / "out" / "complete.json").unlink()
        again = generate(cfg, handle_signals=False)
    finally:
        server.stop()
    assert first.ok == 24 and again.resumed == 24 and again.ok == 0
    assert not (tmp_path / "out" / checkpoint_name()).exists()
