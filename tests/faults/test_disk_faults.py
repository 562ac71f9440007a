"""The output directory fails mid-run: disk full (ENOSPC), deleted, made read-only; a torn tail from power loss.

ENOSPC runs twice: on a real 96 KiB tmpfs (needs mount, i.e. root or CAP_SYS_ADMIN; skipped otherwise)
and through the journal's OS-call seam (Journal.os_write), which fails a write part way, as a full disk
does. Read-only: the seam fails writes with EROFS mid-run, then a real read-only bind mount
(as root, chmod does not stop writes) meets the resume.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
from faultkit import audit, gen_config
from helpers import write_prompts
from standin_server import StandinServer

from fleetgen.errors import OutputError
from fleetgen.generate import generate
from fleetgen.generate.journal.directory import Journal

N = 300
IDS = [f"p{i}" for i in range(N)]


@pytest.fixture(scope="module")
def standin():
    server = StandinServer(delay_per_token_s=0.005, max_concurrent=16)
    url = server.start()
    yield url
    server.stop()


def _mount(*args: str) -> bool:
    r = subprocess.run(["mount", *args], capture_output=True, text=True)
    if r.returncode:
        print(f"mount {' '.join(args)}: {r.stderr.strip()}")
    return r.returncode == 0


@pytest.fixture
def tmpfs(tmp_path):
    d = tmp_path / "small"
    d.mkdir()
    if not _mount("-t", "tmpfs", "-o", "size=96k", "tmpfs", str(d)):
        pytest.skip("cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN); the seam test covers ENOSPC")
    yield d
    subprocess.run(["umount", "-l", str(d)], check=False)


def _prompts(tmp_path: Path) -> None:
    # Long prompts make long result lines, so the small disk fills within the run.
    write_prompts(tmp_path / "p.jsonl", N, words="Describe this color in detail. " * 8)


def test_disk_full_on_a_real_tmpfs_stops_cleanly_and_resumes(tmp_path, tmpfs, standin, recorder):
    _prompts(tmp_path)
    out = tmpfs / "out"
    with pytest.raises(OutputError) as exc:
        generate(gen_config(tmp_path, [standin], output_dir=out), handle_signals=False)
    e = exc.value
    assert "No space left on device (ENOSPC)" in e.message and "results.jsonl" in e.message
    assert "free space" in e.hint and "resume" in e.hint
    first = audit(out, IDS, 1)
    assert not first.torn_tail and first.corrupt == 0 and first.duplicated == 0, first
    assert 0 < first.results < N
    assert not list(out.glob("*.tmp")), "a half-written temporary file was left behind"
    assert _mount("-o", "remount,size=16m", str(tmpfs))  # space returns
    stats = generate(gen_config(tmp_path, [standin], output_dir=out), handle_signals=False)
    a = audit(out, IDS, 1)
    recorder.record(
        "disk_full_tmpfs",
        fault="disk full (ENOSPC) while writing results",
        injected="output directory on a 96 KiB tmpfs; space returned by remounting at 16 MiB",
        runs=2,
        audit=a,
        outcome=f"stopped: '{e.message[-80:]}' / hint '{e.hint}'; {first.results} rows kept, no torn line; "
        f"resume: {stats.resumed} done, {stats.ok} new",
    )
    a.assert_clean()


def test_disk_full_through_the_write_seam_cuts_the_partial_batch(tmp_path, standin, recorder, monkeypatch):
    _prompts(tmp_path)
    out = tmp_path / "out"
    budget = {"bytes": 60_000}
    real_write = os.write

    def full_disk_write(fd: int, data) -> int:
        """os.write as on a disk with `budget` bytes left: a short write, then ENOSPC."""
        if budget["bytes"] <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        n = real_write(fd, bytes(data[: budget["bytes"]]))
        budget["bytes"] -= n
        return n

    monkeypatch.setattr(Journal, "os_write", staticmethod(full_disk_write))
    with pytest.raises(OutputError) as exc:
        generate(gen_config(tmp_path, [standin]), handle_signals=False)
    assert "ENOSPC" in exc.value.message
    first = audit(out, IDS, 1)
    assert not first.torn_tail and first.corrupt == 0 and 0 < first.results < N, first
    monkeypatch.undo()
    stats = generate(gen_config(tmp_path, [standin]), handle_signals=False)
    a = audit(out, IDS, 1)
    recorder.record(
        "disk_full_seam",
        fault="disk full (ENOSPC), partial write",
        injected="Journal.os_write (the os.write seam) writes what 60 KB allows, then raises ENOSPC",
        runs=2,
        audit=a,
        outcome=f"the partial batch was cut back (no torn line), {first.results} rows kept; resume: {stats.ok} new",
    )
    a.assert_clean()


def test_output_directory_deleted_mid_run(tmp_path, recorder):
    server = StandinServer(delay_per_token_s=0.01, max_concurrent=8)
    url = server.start()
    _prompts(tmp_path)
    out = tmp_path / "out"

    def delete_when_writing() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            p = out / "results.jsonl"
            if p.exists() and p.stat().st_size > 5000:
                shutil.rmtree(out)
                return
            time.sleep(0.01)

    t = threading.Thread(target=delete_when_writing)
    t.start()
    try:
        with pytest.raises(OutputError) as exc:
            generate(gen_config(tmp_path, [url]), handle_signals=False)
        t.join()
        assert "was deleted during the run" in exc.value.message and "run the same command again" in exc.value.hint
        stats = generate(gen_config(tmp_path, [url]), handle_signals=False)
    finally:
        server.stop()
    a = audit(out, IDS, 1)
    recorder.record(
        "outdir_deleted",
        fault="output directory deleted mid-run",
        injected="rm -r of the output directory once results.jsonl passed 5 KB",
        runs=2,
        audit=a,
        outcome=f"stopped at the next commit: '{exc.value.message[-60:]}'; rerun redid all {stats.ok} rows",
    )
    a.assert_clean()


def test_output_directory_made_read_only_mid_run(tmp_path, standin, recorder, monkeypatch):
    """Mid-run through the seam (EROFS, as ext4 errors=remount-ro does); then a real read-only bind mount.

    The kernel refuses to remount a mount read-only while files on it are open for writing
    ("mount point is busy"), and chmod does not stop root: so a directory cannot become read-only
    under a running journal by hand; a file system forced read-only by I/O errors can, which the seam plays.
    """
    _prompts(tmp_path)
    out = tmp_path / "out"
    written = {"bytes": 0}
    real_write = os.write

    def read_only_after_5kb(fd: int, data) -> int:
        if written["bytes"] > 5000:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))
        n = real_write(fd, data)
        written["bytes"] += n
        return n

    monkeypatch.setattr(Journal, "os_write", staticmethod(read_only_after_5kb))
    with pytest.raises(OutputError) as exc:
        generate(gen_config(tmp_path, [standin]), handle_signals=False)
    monkeypatch.undo()
    assert "Read-only file system (EROFS)" in exc.value.message and "writable" in exc.value.hint
    first = audit(out, IDS, 1)
    assert not first.torn_tail and first.corrupt == 0 and 0 < first.results < N, first
    refused = "(bind mount unavailable)"
    if _mount("--bind", str(out), str(out)):
        try:
            assert _mount("-o", "remount,bind,ro", str(out))
            with pytest.raises(OutputError) as again:  # a resume into a read-only directory is refused clearly
                generate(gen_config(tmp_path, [standin]), handle_signals=False)
            assert "Read-only file system (EROFS)" in again.value.message and "writable" in again.value.hint
            refused = again.value.message[-50:]
        finally:
            subprocess.run(["umount", "-l", str(out)], check=False)
    stats = generate(gen_config(tmp_path, [standin]), handle_signals=False)
    a = audit(out, IDS, 1)
    recorder.record(
        "outdir_read_only",
        fault="output directory made read-only mid-run",
        injected="Journal.os_write raises EROFS after 5 KB (as a file system forced read-only does); then the "
        "directory bind-mounted read-only for the resume",
        runs=3,
        audit=a,
        outcome=f"stopped: '{exc.value.message[-55:]}', {first.results} rows kept; resume into the read-only "
        f"mount refused: '{refused}'; writable again: {stats.ok} new",
    )
    a.assert_clean()


def test_power_loss_torn_tail_is_repaired_on_resume(tmp_path, standin, recorder):
    write_prompts(tmp_path / "p.jsonl", 50)
    ids = IDS[:50]
    generate(gen_config(tmp_path, [standin]), handle_signals=False)
    results = tmp_path / "out" / "results.jsonl"
    lines = results.read_bytes().splitlines(keepends=True)
    keep = lines[:30] + [lines[30][: len(lines[30]) // 2]]  # what a power cut mid-write leaves
    results.write_bytes(b"".join(keep))
    assert audit(tmp_path / "out", ids, 1).torn_tail
    stats = generate(gen_config(tmp_path, [standin]), handle_signals=False)
    a = audit(tmp_path / "out", ids, 1)
    recorder.record(
        "power_loss_torn_tail",
        fault="power loss mid-write (torn last line)",
        injected="results.jsonl truncated to 30 lines and half of the 31st",
        runs=2,
        audit=a,
        outcome=f"resume cut the torn line (note printed) and redid {stats.ok} rows",
    )
    a.assert_clean()
