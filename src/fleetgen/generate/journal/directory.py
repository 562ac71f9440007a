"""The output directory as a crash-safe journal: append-only results and errors, keyed by (id, sample).

A line is written whole, in one write() per batch, then flushed and fsynced; after a crash only
the last line can be torn, and `repair` (torn.py) cuts it. What is done is read back by id, never
by counting lines (loaddone.py): from the key index beside the results (keyindex.py) for what it
covers, from the results themselves for the rest.
"""

from __future__ import annotations

import errno
import logging
import os
import time
import zlib
from pathlib import Path
from typing import Any

import orjson

from fleetgen.atomic import fsync_dir
from fleetgen.errors import OutputError
from fleetgen.generate.journal import donefile, keyindex
from fleetgen.generate.journal.linekey import KEY_RE, key_of
from fleetgen.generate.journal.loaddone import read_done
from fleetgen.generate.journal.outdir import make_output_dir, output_error
from fleetgen.generate.journal.torn import repair
from fleetgen.rows.doneset import DoneSet, id_hash
from fleetgen.rows.files import journal_names

log = logging.getLogger(__name__)

RESULTS, ERRORS = journal_names()[:2]  # the whole job's journal files


def archive_errors(outdir: Path, suffix: str = "") -> Path | None:
    """Move errors.jsonl aside (atomic rename) so its rows are attempted again and recorded once."""
    errors = outdir / journal_names(suffix)[1]
    if not errors.exists() or errors.stat().st_size == 0:
        return None
    n = 1
    while (outdir / f"errors{suffix}.retried-{n}.jsonl").exists():
        n += 1
    target = outdir / f"errors{suffix}.retried-{n}.jsonl"
    os.replace(errors, target)
    fsync_dir(outdir)
    return target


class Journal:
    """Append-only results and errors files of one output directory; only the writer task calls commit.

    Writes go straight to the file descriptors (no userspace buffer that a later flush could
    half-write). A batch that fails part way (disk full, read-only, I/O error) is cut back to
    where it started, so the file still ends with a complete line, and OutputError says why.
    """

    # The OS-call boundary, a seam for fault tests (ENOSPC, EIO) that leaves the journal logic real.
    os_write = staticmethod(os.write)
    os_fsync = staticmethod(os.fsync)
    # The done-set snapshot (donefile.py) after a commit: at most this often, and at most ~2% of the
    # writer's time (50 times its last cost apart): a snapshot is the whole table, 24 bytes a slot
    # (what that costs: BENCHMARKS.md, "issue 26").
    snapshot_every_s = 30.0

    lease: Any = None  # the writer's lease (lease.py): checked before each commit, so a superseded writer stops

    def __init__(self, outdir: Path, suffix: str = "") -> None:
        self.outdir = Path(outdir)
        self._suffix = suffix
        results, errors, index = journal_names(suffix)
        self._paths = (self.outdir / results, self.outdir / errors)
        self._fds: list[int] = []
        try:
            for path in self._paths:
                self._fds.append(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666))
        except OSError as e:
            self.close()
            raise output_error(path, e) from None
        try:
            self._index_fd: int | None = os.open(self.outdir / index, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        except OSError:
            self._index_fd = None  # no index (it could not be written): resumes read the results
        # (results end, CRC of its last line, errors end, CRC of its last line): what is fsynced, for
        # the resume checkpoint (checkpoint.py). One tuple, replaced whole after each commit.
        ends = []
        for fd, path in zip(self._fds, self._paths):
            size = os.fstat(fd).st_size
            ends += [size, (keyindex.last_line_crc(path, size) or 0) if size else 0]
        self.ends: tuple[int, int, int, int] = tuple(ends)  # type: ignore[assignment]
        # Set by open: the done set this journal's commits keep equal to the disk, and whether the
        # key index is level with the results (a snapshot records its length only then).
        self.done: DoneSet | None = None
        self.index_level = False
        self._unsaved = True  # the done set holds more than the snapshot on disk (open clears it when it used one)
        self._snapshot_at, self._snapshot_cost = time.monotonic(), 0.0

    @classmethod
    def open(cls, outdir: Path, *, retry_errors: bool, suffix: str = "", lease: Any = None) -> tuple[Journal, DoneSet]:
        """Repair torn tails, set errors aside when retrying them, and read what is done (of one shard's journal).

        `lease` (lease.Lease), taken before: every commit checks it still holds the journal.
        """
        outdir = make_output_dir(outdir)
        for name in journal_names(suffix)[:2]:
            try:
                cut = repair(outdir / name)
            except OSError as e:
                raise output_error(outdir / name, e) from None
            if cut:
                log.info(f"repaired {name}: cut {cut} bytes of a torn last line")
        if retry_errors:
            try:
                archive_errors(outdir, suffix)
            except OSError as e:
                raise output_error(outdir / journal_names(suffix)[1], e) from None
        done, level, snapped = read_done(outdir, update_index=True, suffix=suffix)
        journal = cls(outdir, suffix)
        journal.lease = lease
        journal.done, journal.index_level, journal._unsaved = done, level, not snapped
        fsync_dir(outdir)
        return journal, done

    def commit(
        self, results: list[bytes], errors: list[bytes], keys: tuple[list[int], list[int]] | None = None
    ) -> None:
        """Append each batch, then fsync: every line is either all there or not there at all.

        `keys`: each result line's (id hash, sample), as `record` computed them (Batch.hashes, Batch.samples),
        so this thread runs no Python per line while the event loop
        waits for the GIL; read from the lines when not given.
        """
        if self.lease is not None:
            self.lease.check()  # the fence: a writer whose lease was taken over appends nothing more
        r_end, r_crc, e_end, e_crc = self.ends
        if results:
            data = b"".join(results)
            start = self._append(self._fds[0], self._paths[0], data)
            r_end, r_crc = start + len(data), zlib.crc32(results[-1])
            self._index(results, start, r_end, keys)
        if errors:
            data = b"".join(errors)
            e_end, e_crc = self._append(self._fds[1], self._paths[1], data) + len(data), zlib.crc32(errors[-1])
        self.ends = (r_end, r_crc, e_end, e_crc)
        if self.done is not None:  # `record` put each line's key in the done set; these count them as a scan would
            self.done.results += len(results)
            self.done.errors += len(errors)
            self._unsaved = True
        if self.snapshot_due():  # the caller recorded exactly this batch: the done set equals the disk
            self.save_done()

    def snapshot_due(self) -> bool:
        """Whether a commit now also writes the done-set snapshot (snapshot_every_s, and its cost)."""
        elapsed = time.monotonic() - self._snapshot_at
        return elapsed >= max(self.snapshot_every_s, 50 * self._snapshot_cost)

    def save_done(self, *, if_changed: bool = False) -> None:
        """Write the done-set snapshot; only when the done set equals
        the journal on disk (after a commit, at a run's end).

        if_changed (a run's end): not when this run committed nothing and its done set came from a
        snapshot: a resume with nothing to do then writes nothing (the snapshot on disk may hold a
        prefix; the next resume reads the same few index frames after it).
        Advisory: without a level key index nothing is written (the snapshot could not say where
        to read the index on), and an OSError leaves the old snapshot, which stays true of a prefix.
        """
        if self.done is None or not self.index_level or self._index_fd is None or (if_changed and not self._unsaved):
            return
        t0 = time.monotonic()
        index = self.outdir / journal_names(self._suffix)[2]
        try:
            index_len = os.fstat(self._index_fd).st_size
            tail = keyindex.tail_crc(index, index_len)
            if tail is not None:
                donefile.save(self.outdir / donefile.snapshot_name(self._suffix), self.done, self.ends, index_len, tail)
        except OSError as e:
            log.warning(f"done-set snapshot not saved ({e.strerror or e}); the next resume reads the key index instead")
        self._snapshot_at = time.monotonic()
        self._snapshot_cost = self._snapshot_at - t0
        self._unsaved = False

    def _index(self, lines: list[bytes], start: int, end: int, keys: tuple[list[int], list[int]] | None = None) -> None:
        """Append the keys of result lines now fsynced in bytes [start, end); a failure only stops the index."""
        if self._index_fd is None:
            return
        if keys is not None:
            hashes, samples = keys
        else:
            hashes, samples = [], []
            for line in lines:
                m = KEY_RE.match(line)
                rid, sample = (orjson.loads(m.group(1)), int(m.group(2))) if m else key_of(line)[:2]
                hashes.append(id_hash(rid))
                samples.append(sample)
        frame = keyindex.encode_frame(hashes, samples, start, end, lines[-1])
        try:
            n = os.write(self._index_fd, frame)
            if n != len(frame):
                raise OSError(errno.EIO, f"short write ({n} of {len(frame)} bytes)")
        except OSError as e:
            # The frame is torn or missing: the next open keeps the frames before it and reads the rest
            # from the results. Writing later frames would leave a gap, so the index stops here.
            log.warning(f"key index not updated ({e.strerror or e}); the next resume reads the results instead")
            os.close(self._index_fd)
            self._index_fd = None

    def _append(self, fd: int, path: Path, data: bytes) -> int:
        """Write data at the end of the file and fsync; returns the offset it starts at."""
        try:
            if os.fstat(fd).st_nlink == 0:
                # Writes to a deleted file succeed and vanish: stop instead of losing the run's work.
                raise OutputError(
                    f"{path} was deleted during the run (or its directory was)",
                    hint="run the same command again: samples written since are not counted as done and are redone",
                )
            start = os.lseek(fd, 0, os.SEEK_END)
        except OSError as e:
            raise output_error(path, e) from None
        view = memoryview(data)
        try:
            while view:
                n = self.os_write(fd, view)
                view = view[n:]
            self.os_fsync(fd)
        except OSError as e:
            try:
                os.ftruncate(fd, start)  # no torn line: the batch is all in or all out
                os.fsync(fd)
            except OSError:
                pass  # a resume cuts the torn tail (repair) if even this fails
            raise output_error(path, e) from None
        return start

    def close(self) -> None:
        while self._fds:
            os.close(self._fds.pop())
        if getattr(self, "_index_fd", None) is not None:
            os.close(self._index_fd)
            self._index_fd = None
