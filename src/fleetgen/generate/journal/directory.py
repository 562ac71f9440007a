"""The output directory as a crash-safe journal: append-only results and errors, keyed by (id, sample).

A line is written whole, in one write() per batch, then flushed and fsynced; after a crash only
the last line can be torn, and `repair` cuts it. What is done is read back by id, never by
counting lines: from the key index beside the results (keyindex.py) for what it covers, from the
results themselves for the rest.
"""

from __future__ import annotations

import errno
import os
import re
import sys
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from fleetgen.errors import InputError, OutputError, ResumeMismatchError
from fleetgen.generate.journal import donefile
from fleetgen.generate.journal import keyindex
from fleetgen.rows.files import journal_names
from fleetgen.rows.doneset import U64, DoneSet, id_hash
from fleetgen.rows.history import HISTORY, record_identity
from fleetgen.generate.journal.keyindex import line_start

RESULTS = "results.jsonl"
ERRORS = "errors.jsonl"
JOB = "job.json"
STATS = "stats.json"


# Records are written with "id" then "sample" first, so the key is read without parsing the whole line.
# The id's string is written unrolled ("[^"\\]*(?:\\.[^"\\]*)*", not "(?:[^"\\]|\\.)*"): the same
# strings, half the time a line in Python's regex engine.
_KEY_RE = re.compile(rb'^\{"id":("[^"\\]*(?:\\.[^"\\]*)*"|null),"sample":(\d+|null)')


def repair(path: Path) -> int:
    """Cut a torn or unparsable tail so the file ends with a complete line; returns bytes removed."""
    if not path.exists():
        return 0
    size = path.stat().st_size
    with open(path, "rb+") as f:
        keep = size
        while keep > 0:
            start = line_start(f, keep)
            f.seek(keep - 1)
            if f.read(1) == b"\n":
                f.seek(start)
                try:
                    orjson.loads(f.read(keep - start))
                    break
                except orjson.JSONDecodeError:
                    pass
            keep = start
        if keep != size:
            f.truncate(keep)
            f.flush()
            os.fsync(f.fileno())
    return size - keep


def _key_of(line: bytes) -> tuple[str | None, int | None, dict[str, Any] | None]:
    m = _KEY_RE.match(line)
    if m:
        rid = orjson.loads(m.group(1))
        sample = None if m.group(2) == b"null" else int(m.group(2))
        return rid, sample, None
    rec = orjson.loads(line)
    return rec.get("id"), rec.get("sample"), rec


KeysChunk = Callable[[np.ndarray, int, int, bytes], None]


def _scan_results(path: Path, start: int, on_chunk: KeysChunk) -> int:
    """Keys of results.jsonl from byte `start` on, handed over a chunk at a time; returns the end offset.

    on_chunk(keys, chunk_start, chunk_end, last_line) gets up to FRAME_KEYS keys of the lines in
    bytes [chunk_start, chunk_end), which end with `last_line`. The key is read from the line's head
    by regex, the id decoded without a JSON parse unless escaped.
    """
    match = _KEY_RE.match
    hashes: list[int] = []
    samples: list[int] = []
    last = b""
    with open(path, "rb") as f:
        f.seek(start)
        chunk_start = start
        for line in f:
            last = line
            m = match(line)
            if m is not None and m.group(1) != b"null" and m.group(2) != b"null":
                raw, sample = m.groups()
                rid = orjson.loads(raw) if b"\\" in raw else raw[1:-1].decode()
                sample = int(sample)
            elif line.strip():
                rid, sample, _ = _key_of(line)
                if type(rid) is not str or type(sample) is not int or sample < 0:
                    continue
            else:
                continue
            if sample < 1 << 32:
                hashes.append(id_hash(rid))
                samples.append(sample)
                if len(hashes) == keyindex.FRAME_KEYS:
                    here = f.tell()
                    on_chunk(_keys_array(hashes, samples), chunk_start, here, last)
                    hashes, samples, chunk_start = [], [], here
        end = f.tell()
    if end > chunk_start:
        on_chunk(_keys_array(hashes, samples), chunk_start, end, last)
    return end


def _keys_array(hashes: list[int], samples: list[int]) -> np.ndarray:
    keys = np.empty(len(hashes), dtype=keyindex.KEY_DTYPE)
    keys["lo"] = [h & U64 for h in hashes]
    keys["hi"] = [h >> 64 for h in hashes]
    keys["sample"] = samples
    return keys




def load_done(outdir: Path, *, update_index: bool = False, suffix: str = "") -> DoneSet:
    """Read results and errors into a DoneSet: results through the key index where it is sound, the rest scanned.

    With update_index, the index is brought level with the results: a stale or missing one is
    rewritten (atomically), a torn tail cut, and the keys read from the results appended.
    A sound done-set snapshot (donefile.py) stands for everything up to the ends it records.
    """
    return _load_done(outdir, update_index=update_index, suffix=suffix)[0]


def _from_snapshot(outdir: Path, suffix: str) -> tuple[DoneSet, keyindex.Loaded, int] | None:
    """The snapshot's done set with the index frames after it added, its index view and the errors offset; None: unusable."""
    results, errors, index = (outdir / n for n in journal_names(suffix))
    snap = donefile.load(outdir / donefile.snapshot_name(suffix), results, errors, index)
    if snap is None:
        return None
    done = snap.done

    def add(keys: np.ndarray) -> None:
        done.results += done.add_many(keys["lo"], keys["hi"], keys["sample"])

    loaded = keyindex.read_index(index, on_keys=add, start=snap.index)
    if loaded is None or not keyindex.matches_results(loaded, results):
        donefile.last_refusal = "stale: the key index after it describes other results"
        return None  # the full path sorts it out
    return done, loaded, snap.errors_end


def _load_done(outdir: Path, *, update_index: bool, suffix: str) -> tuple[DoneSet, bool, bool]:
    """load_done; whether the key index is now level with the results (a done-set snapshot may name its length);
    whether a snapshot was used."""
    names = journal_names(suffix)
    results, index = outdir / names[0], outdir / names[2]

    def add(keys: np.ndarray) -> None:  # `done` is looked up when called: the one in use then
        done.results += done.add_many(keys["lo"], keys["hi"], keys["sample"])

    errors_from = 0
    snapped = _from_snapshot(outdir, suffix)
    if snapped is not None:
        done, loaded, errors_from = snapped
    else:
        done = DoneSet()

        try:  # at most this many ids: a table of that size from the start never grows (growing holds two tables)
            done.reserve((index.stat().st_size - len(keyindex.HEADER)) // keyindex.KEY_DTYPE.itemsize)
        except FileNotFoundError:
            pass
        loaded = keyindex.read_index(index, on_keys=add)
        if loaded is not None and not keyindex.matches_results(loaded, results):
            loaded, done = None, DoneSet()  # stale: it describes other results; read them all instead

    start = loaded.end if loaded is not None else 0
    frames = _IndexLeveler(index, loaded) if update_index else None

    def scanned(keys: np.ndarray, chunk_start: int, chunk_end: int, last: bytes) -> None:
        add(keys)
        if frames is not None:
            frames.append(keyindex.encode_keys(keys, chunk_start, chunk_end, last))

    if results.exists():
        _scan_results(results, start, scanned)
    level = frames.finish() if frames is not None else False
    errors = outdir / names[1]
    if errors.exists():
        with open(errors, "rb") as f:
            f.seek(errors_from)  # a snapshot holds the errors before its end
            for line in f:
                if not line.strip():
                    continue
                rid, sample, rec = _key_of(line)
                if sample is None:
                    # A row-level input error: the whole row, keyed by its line in the prompt file.
                    rec = rec if rec is not None else orjson.loads(line)
                    if isinstance(rec.get("line"), int):
                        done.bad_lines.add(rec["line"])
                        done.errors += 1
                elif isinstance(rid, str) and done.add(rid, sample):
                    done.errors += 1
    return done, level, snapped is not None


class _IndexLeveler:
    """Brings the index level with the results: a rewrite (temporary file, fsync, rename) or appends after its sound part.

    Advisory only: on an OSError the index is left for the next open, which reads the results instead.
    """

    def __init__(self, index: Path, loaded: keyindex.Loaded | None) -> None:
        self.index, self.rewrite, self.f = index, loaded is None, None
        self.tmp = index.with_name(f"{index.name}.{os.getpid()}.tmp")
        try:
            if self.rewrite:
                self.f = open(self.tmp, "wb")
                self.f.write(keyindex.HEADER)
            else:
                if not loaded.whole:
                    os.truncate(index, loaded.good_bytes)
                self.f = open(index, "ab")
        except OSError as e:
            self._give_up(e)

    def append(self, frame: bytes) -> None:
        if self.f is not None:
            try:
                self.f.write(frame)
            except OSError as e:
                self._give_up(e)

    def finish(self) -> bool:
        """Close the index; True when it is now level with the results."""
        if self.f is None:
            return False
        try:
            if self.rewrite:
                self.f.flush()
                os.fsync(self.f.fileno())
                self.f.close()
                os.replace(self.tmp, self.index)
                _fsync_dir(self.index.parent)
            else:
                self.f.close()
        except OSError as e:
            self._give_up(e)
            return False
        self.f = None
        return True

    def _give_up(self, e: OSError) -> None:
        print(f"note: key index {self.index} not updated ({e.strerror or e}); the next resume reads the results instead",
              file=sys.stderr)
        if self.f is not None:
            try:
                self.f.close()
            except OSError:
                pass
        self.f = None
        if self.rewrite:
            self.tmp.unlink(missing_ok=True)


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
    _fsync_dir(outdir)
    return target


def check_identity(outdir: Path, identity: dict[str, Any], *, force: bool) -> str:
    """Record the job's identity, or refuse to resume a directory that belongs to another job.

    Returns the identity's digest, which every row of this run carries; job-history.jsonl keeps
    each identity the directory was run with (job_history.py), so a forced run loses none.
    """
    path = outdir / JOB
    recorded, forced = None, False
    if path.exists():
        try:
            recorded = orjson.loads(path.read_bytes())
        except orjson.JSONDecodeError:
            recorded = None
        if recorded != identity:
            diffs = _identity_diff(recorded, identity)
            if not force:
                raise ResumeMismatchError(
                    f"{outdir} holds a different job: {diffs}",
                    hint="use the original settings, another --output directory, or --force to resume anyway",
                )
            forced = True
    try:
        digest = record_identity(outdir, identity, previous=recorded, forced=forced)
    except OSError as e:
        raise output_error(outdir / HISTORY, e) from None
    write_atomic(path, orjson.dumps(identity, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
    return digest


def _identity_diff(old: Any, new: dict[str, Any]) -> str:
    if not isinstance(old, dict):
        return "job.json is unreadable"
    parts = []
    flat_old, flat_new = _flatten(old), _flatten(new)
    for key in sorted(set(flat_old) | set(flat_new)):
        if flat_old.get(key) != flat_new.get(key):
            parts.append(f"{key} was {flat_old.get(key)!r}, now {flat_new.get(key)!r}")
    return "; ".join(parts)


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def write_atomic(path: Path, data: bytes) -> None:
    """Write to a temporary file, fsync, rename: readers see the old file or the new one; OSError becomes OutputError."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # per process: shards write job.json side by side
    try:
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)  # a half-written temporary file must not stay behind
            raise
        _fsync_dir(path.parent)
    except OSError as e:
        raise output_error(path, e) from None


_WHAT_TO_DO = {
    errno.ENOSPC: "free space on that disk, then run the same command again to resume",
    errno.EDQUOT: "free space within your quota, then run the same command again to resume",
    errno.EROFS: "make the directory writable (or pass another --output), then run the same command again to resume",
    errno.EACCES: "make the directory writable (or pass another --output), then run the same command again to resume",
    errno.EPERM: "make the directory writable (or pass another --output), then run the same command again to resume",
    errno.ENOENT: "the output directory was removed: restore it, or run again to start it anew",
}


def make_output_dir(outdir: Path) -> Path:
    """The output directory, created if need be; an InputError saying what to do if it cannot be."""
    outdir = Path(outdir)
    try:
        outdir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"cannot create output directory {outdir}: {e.strerror}",
                         hint="pass -o a directory (new or existing) you can write to, not a file") from None
    return outdir


def output_error(path: Path, e: OSError) -> OutputError:
    """An OSError on the output directory, with the file, the cause and what to do."""
    cause = e.strerror or str(e)
    name = errno.errorcode.get(e.errno or 0, "")
    return OutputError(
        f"cannot write {path}: {cause}{f' ({name})' if name else ''}; every line written before is complete",
        hint=_WHAT_TO_DO.get(e.errno or 0, "fix the output directory, then run the same command again to resume"),
    )


def _fsync_dir(d: Path) -> None:
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Journal:
    """Append-only results and errors files of one output directory; only the writer task calls commit.

    Writes go straight to the file descriptors (no userspace buffer that a later flush could
    half-write). A batch that fails part way (disk full, read-only, I/O error) is cut back to
    where it started, so the file still ends with a complete line, and OutputError says why.
    """

    # The OS-call boundary, a seam for fault tests (ENOSPC, EIO) that leaves the journal logic real.
    _write = staticmethod(os.write)
    _fsync = staticmethod(os.fsync)
    # The done-set snapshot (donefile.py) after a commit: at most this often, and at most ~2% of the
    # writer's time (a snapshot is the whole table: ~50 MB at 1M ids, ~400 MB at 10M).
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
        # the resume checkpoint (watermark.py). One tuple, replaced whole after each commit.
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
                print(f"note: repaired {name}: cut {cut} bytes of a torn last line", flush=True)
        if retry_errors:
            try:
                archive_errors(outdir, suffix)
            except OSError as e:
                raise output_error(outdir / journal_names(suffix)[1], e) from None
        done, level, snapped = _load_done(outdir, update_index=True, suffix=suffix)
        journal = cls(outdir, suffix)
        journal.lease = lease
        journal.done, journal.index_level, journal._unsaved = done, level, not snapped
        _fsync_dir(outdir)
        return journal, done

    def commit(self, results: list[bytes], errors: list[bytes]) -> None:
        """Append each batch, then fsync: every line is either all there or not there at all."""
        if self.lease is not None:
            self.lease.check()  # the fence: a writer whose lease was taken over appends nothing more
        r_end, r_crc, e_end, e_crc = self.ends
        if results:
            data = b"".join(results)
            start = self._append(self._fds[0], self._paths[0], data)
            r_end, r_crc = start + len(data), zlib.crc32(results[-1])
            self._index(results, start, r_end)
        if errors:
            data = b"".join(errors)
            e_end, e_crc = self._append(self._fds[1], self._paths[1], data) + len(data), zlib.crc32(errors[-1])
        self.ends = (r_end, r_crc, e_end, e_crc)
        if self.done is not None:  # `record` put each line's key in the done set; these count them as a scan would
            self.done.results += len(results)
            self.done.errors += len(errors)
            self._unsaved = True
        if self._snapshot_due():  # the caller recorded exactly this batch: the done set equals the disk
            self.save_done()

    def _snapshot_due(self) -> bool:
        elapsed = time.monotonic() - self._snapshot_at
        return elapsed >= max(self.snapshot_every_s, 50 * self._snapshot_cost)

    def save_done(self, *, if_changed: bool = False) -> None:
        """Write the done-set snapshot; only when the done set equals the journal on disk (after a commit, at a run's end).

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
            print(f"note: done-set snapshot not saved ({e.strerror or e}); the next resume reads the key index instead",
                  file=sys.stderr)
        self._snapshot_at = time.monotonic()
        self._snapshot_cost = self._snapshot_at - t0
        self._unsaved = False

    def _index(self, lines: list[bytes], start: int, end: int) -> None:
        """Append the keys of result lines now fsynced in bytes [start, end); a failure only stops the index."""
        if self._index_fd is None:
            return
        hashes, samples = [], []
        for line in lines:
            m = _KEY_RE.match(line)
            rid, sample = (orjson.loads(m.group(1)), int(m.group(2))) if m else _key_of(line)[:2]
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
            print(f"note: key index not updated ({e.strerror or e}); the next resume reads the results instead", file=sys.stderr)
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
                n = self._write(fd, view)
                view = view[n:]
            self._fsync(fd)
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


def dumps_line(record: dict[str, Any]) -> bytes:
    """One JSONL line; records must start with "id" and "sample" (see _KEY_RE)."""
    return orjson.dumps(record) + b"\n"
