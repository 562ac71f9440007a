"""The resume checkpoint: how far into the prompt file every row is resolved, so a resume seeks past it.

`resume.ckpt` (`resume.shard-i-of-N.ckpt` for a shard) beside the results holds a header (a digest
of the job: its identity, samples per prompt, shard and fleetgen version) and frames appended as the
low-watermark moves. A frame says: every prompt row on a line before `line` (bytes before `offset`)
is resolved (each sample of its id in the results or errors, its line recorded as a row error, or
another shard's row); what a resume counts as done for those rows; the ids they claimed (hash and
line, for the duplicate-id check of the rows after the watermark); and how long the results and
errors files were, with a CRC of the last line of each.

Durability rule (the key index's): a frame is written only after the results and errors lines it
relies on are fsynced, so it can lag the journal but never lead it. Loading keeps frames while whole,
in order and CRC-sound; the last one kept must still describe a prefix of the results and errors
(their line at the recorded end has the recorded CRC) and the header must match this job. Anything
else — a missing file, another job's, results or errors cut or replaced, errors set aside by
--retry-errors, a prompt file that changed (its sha256 is in the identity) — and the resume reads the
whole prompt file, as without a checkpoint, and starts a new one; a torn tail costs only the frames
after the last sound one. Not fsynced: losing its tail costs re-reading that much of the prompt file,
never a row. JSONL prompt files only (a Parquet file is always read whole).
"""

from __future__ import annotations

import logging
import os
import struct
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from hashlib import blake2b
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from fleetgen.atomic import write_atomic
from fleetgen.generate.journal import claimsfile
from fleetgen.generate.journal.keyindex import last_line_crc
from fleetgen.generate.journal.prefixclaims import CLAIM_DTYPE, ClaimBuffer, PrefixClaims
from fleetgen.rows.doneset import U64
from fleetgen.version import __version__

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from fleetgen.rows.doneset import DoneSet

_MAGIC = b"FGCKPT1\n"
_FRAME_MAGIC = b"CP01"
# magic, claims, watermark line, its byte offset, resumed count, results end, errors end,
# CRC32 of the results' and errors' line ending there, CRC32 of the claims, CRC32 of the fields before it
_FRAME = struct.Struct("<4sIQQQQQIII")
_CRC = struct.Struct("<I")
_HEAD = _FRAME.size + _CRC.size  # a frame's fields and their CRC, before its claims
FLUSH_CLAIMS = 1 << 14  # resolved claims buffered before a frame is written without waiting for a commit (a full pass
# killed re-reads at most this many rows; 1 << 16 left 38,528 rows
# past the watermark of a 10M-row pass cut at its last frame)


def checkpoint_name(suffix: str = "") -> str:
    return f"resume{suffix}.ckpt"


def job_digest(identity: dict[str, Any], samples: int, shard: tuple[int, int]) -> bytes:
    """What a checkpoint must belong to: the job (prompt file sha256, model, sampling), samples, shard, code version."""
    key = {"identity": identity, "samples": samples, "shard": list(shard), "fleetgen": __version__, "format": 1}
    return blake2b(orjson.dumps(key, option=orjson.OPT_SORT_KEYS), digest_size=32).digest()


@dataclass
class Start:
    """Where a resume starts reading the prompt file, and what the rows before it count for."""

    line: int  # the first line not covered (1-based)
    offset: int  # its byte offset
    count: int  # what a resume counts as done (stats.resumed) for the rows before it
    claims: PrefixClaims


@dataclass
class _Loaded:
    fields: tuple | None  # the last sound frame's fields; None: no frame
    claims: np.ndarray
    good_bytes: int
    whole: bool


def _next_head(f, *, strict: bool = False) -> tuple | None:
    """The fields of the frame header at f's position; None at
    the end, or (unless strict: OSError) where it is not sound."""
    head = f.read(_HEAD)
    if len(head) < _HEAD:
        return None
    fields = _FRAME.unpack_from(head)
    if fields[0] != _FRAME_MAGIC or zlib.crc32(head[: _FRAME.size]) != _CRC.unpack_from(head, _FRAME.size)[0]:
        if strict:
            raise OSError(f"frame at byte {f.tell() - len(head)} is not sound")
        return None
    return fields


def frame_ends(path: Path) -> list[int]:
    """Where the header and each frame after it end, by the lengths
    the frames give: where a checkpoint can be cut to whole frames."""
    data = Path(path).read_bytes()
    ends = [len(_MAGIC) + 32]  # the header: magic and the job digest
    while ends[-1] + _HEAD <= len(data):
        ends.append(ends[-1] + _HEAD + _FRAME.unpack_from(data, ends[-1])[1] * CLAIM_DTYPE.itemsize)
    return ends


def read_checkpoint(path: Path, digest: bytes, skip_before: int = 0) -> _Loaded | None:
    """The sound, ordered frames of the checkpoint at `path`; None when missing or another job's.

    skip_before: a claims snapshot holds every claim of the lines below it, so the claims of frames
    that end at or before it are not read (their headers still are, CRC and all); of the frames
    after, only the claims of lines at or past it are kept.
    """
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return None
    with f:
        size = os.fstat(f.fileno()).st_size
        if f.read(len(_MAGIC) + len(digest)) != _MAGIC + digest:
            return None
        pos = len(_MAGIC) + len(digest)
        claims = np.empty(max(0, (size - pos) // CLAIM_DTYPE.itemsize), dtype=CLAIM_DTYPE)
        raw = claims.view(np.uint8)
        n_claims, last = 0, None
        while (fields := _next_head(f)) is not None:
            n = fields[1]
            if last is not None and any(fields[i] < last[i] for i in (2, 3, 4, 5, 6)):
                break  # a frame never moves back
            if n_claims + n > len(claims):
                break
            if fields[2] <= skip_before:
                if pos + _HEAD + n * CLAIM_DTYPE.itemsize > size:
                    break  # a torn frame
                f.seek(n * CLAIM_DTYPE.itemsize, os.SEEK_CUR)
                pos += _HEAD + n * CLAIM_DTYPE.itemsize
                last = fields
                continue
            part = raw[n_claims * CLAIM_DTYPE.itemsize : (n_claims + n) * CLAIM_DTYPE.itemsize]
            if f.readinto(memoryview(part)) != len(part) or zlib.crc32(part) != fields[9]:
                break
            n_claims += n
            pos += _HEAD + len(part)
            last = fields
    kept = claims[:n_claims]
    if skip_before:
        kept = kept[kept["line"] >= skip_before]
    return _Loaded(last, kept, pos, pos == size)


def _still_valid(fields: tuple, results: Path, errors: Path) -> bool:
    """Whether the results and errors the frame relied on are still there: each file's line at the recorded end."""
    for path, end, crc in ((results, fields[5], fields[7]), (errors, fields[6], fields[8])):
        if end and last_line_crc(path, end) != crc:
            return False
    return True


class CheckpointProgress:
    """Tracks, in prompt-file order, which rows are resolved, and appends a frame each time the watermark moves.

    The work list reports every row it reads: `resolved` for a row that needs nothing (skipped,
    another shard's, a recorded row error), `pending_row` / `pending_bad` for one whose samples or row
    error are still to be written. `advance` runs after each commit, when the done set holds exactly
    what is on disk, and moves the watermark past the rows now resolved.
    """

    def __init__(
        self,
        path: Path,
        fd: int | None,
        done: DoneSet,
        samples: int,
        ends: Callable[[], tuple[int, int, int, int]],
        start: Start | None,
        claims_at: tuple[bytes, int, int] | None = None,
    ) -> None:
        self.path, self._fd, self._done, self._samples, self._ends = path, fd, done, samples, ends
        self.start = start
        # (job digest, the claims snapshot's line, checkpoint offset where this run's frames begin)
        self._claims_at = claims_at
        self._line, self._offset, self._count = (start.line, start.offset, start.count) if start else (1, 0, 0)
        self._written = self._line if start else 0
        self._claims = ClaimBuffer()  # claimed before the watermark, not yet in a frame
        # [test, count, end offset, next line, claims]: test None (resolved) or (ROW, id hash) / (BAD, line);
        # claims a ClaimBuffer for runs of resolved rows (compact: 20 bytes a row however long the run), else a list.
        self._pending: deque[list] = deque()

    @classmethod
    def open(
        cls,
        outdir: Path,
        suffix: str,
        digest: bytes,
        done: DoneSet,
        samples: int,
        paths: tuple[Path, Path],
        ends: Callable[[], tuple[int, int, int, int]],
    ) -> CheckpointProgress:
        """Load the checkpoint when sound and this job's (cutting a torn tail), else start a new one."""
        path = outdir / checkpoint_name(suffix)
        start, fd, run_from = None, None, len(_MAGIC) + len(digest)
        snap = claimsfile.load(outdir / claimsfile.claims_name(suffix), digest)
        try:
            loaded = read_checkpoint(path, digest, skip_before=snap.line if snap else 0)
        except OSError:
            loaded = None
        try:
            if loaded is not None and loaded.fields is not None and _still_valid(loaded.fields, *paths):
                fields = loaded.fields
                start = Start(fields[2], fields[3], fields[4], PrefixClaims(loaded.claims, snap, fields[2]))
                if not loaded.whole:
                    os.truncate(path, loaded.good_bytes)
                fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
                run_from = loaded.good_bytes
            else:
                # Missing, stale or another job's: a new file (temporary, rename) that claims nothing yet.
                write_atomic(path, _MAGIC + digest)
                fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        except OSError as e:
            _note(path, e)
            start, fd = None, None
        return cls(path, fd, done, samples, ends, start, (digest, snap.line if snap else 0, run_from))

    # --- what the work list reports, one call a prompt row, in file order ----------------------------

    def resolved(self, line: int, end: int, count: int, claim: int | None) -> None:
        """Row `line` (ending at byte `end`) needs nothing more: it counts
        `count`, and claims the id hashed `claim` (unless None)."""
        q = self._pending
        if not q:
            self._line, self._offset = line + 1, end
            self._count += count
            if claim is not None:  # ClaimBuffer.add, inlined: this runs once per prompt row of a full pass
                claims = self._claims
                claims.lo.append(claim & U64)
                claims.hi.append(claim >> 64)
                claims.line.append(line)
                if len(claims.line) >= FLUSH_CLAIMS:
                    self._write()
            return
        last = q[-1]
        if last[0] is None:  # runs of resolved rows behind a pending one share one entry
            last[1] += count
            last[2], last[3] = end, line + 1
            if claim is not None:
                last[4].add(claim, line)
        else:
            claims = ClaimBuffer()
            if claim is not None:
                claims.add(claim, line)
            q.append([None, count, end, line + 1, claims])

    def pending_row(self, line: int, end: int, count: int, h: int) -> None:
        """Row `line` claims the id of hash `h` (id_hash) and is resolved once every sample of it is recorded."""
        self._pending.append([(_ROW, h), count, end, line + 1, [(h, line)]])

    def pending_bad(self, line: int, end: int) -> None:
        """Row `line` is resolved once its row error is recorded."""
        self._pending.append([(_BAD, line), 1, end, line + 1, []])

    # --- after commits ----------------------------------------------------------------------------------

    def advance(self) -> None:
        """After a commit (the done set now equals the journal on disk): move past resolved rows, write a frame."""
        q, done, samples, claims = self._pending, self._done, self._samples, self._claims
        count, moved = 0, None
        while q:
            entry = q[0]
            test = entry[0]
            if test is not None:
                kind, key = test
                if not (done.has_all_hash(key, samples) if kind is _ROW else key in done.bad_lines):
                    break
            q.popleft()
            count += entry[1]
            moved = entry
            if entry[4]:
                claims.extend(entry[4])
        if moved is not None:
            self._count += count
            self._offset, self._line = moved[2], moved[3]
        if self._line != self._written:
            self._write()

    def close(self) -> None:
        """At the end of a run whose journal is all on disk: the
        last frame, the claims snapshot, then the file is closed."""
        self.advance()
        if self._fd is not None and self._claims_at is not None and self._written > self._claims_at[1]:
            self._save_claims()
        self.release()

    def _save_claims(self) -> None:
        """The claims before the watermark, sorted, for the next resume to map (claimsfile.py); advisory."""
        digest, _, run_from = self._claims_at  # type: ignore[misc]
        target = self.path.with_name(claimsfile.claims_name(self.path.name[len("resume") : -len(".ckpt")]))
        try:
            new = _frame_claims(self.path, run_from)
            old = self.start.claims.arrays() if self.start is not None else None
            lo, hi, line = (
                np.concatenate([old[k], new[name]]) if old is not None else new[name]
                for k, name in enumerate(("lo", "hi", "line"))
            )
            order = np.argsort(lo, kind="stable")
            claimsfile.save(target, digest, self._written, lo[order], hi[order], line[order])
        except OSError as e:
            log.warning(f"claims snapshot {target} not saved ({e.strerror or e}); the next resume sorts the claims")

    def release(self) -> None:
        """Close the file without a last frame (a run that ended
        on an error: the done set may hold more than the disk)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _write(self) -> None:
        if self._fd is None:
            return
        payload = self._claims.encode()
        n = len(payload) // CLAIM_DTYPE.itemsize
        r_end, r_crc, e_end, e_crc = self._ends()
        head = _FRAME.pack(
            _FRAME_MAGIC, n, self._line, self._offset, self._count, r_end, e_end, r_crc, e_crc, zlib.crc32(payload)
        )
        frame = head + _CRC.pack(zlib.crc32(head)) + payload
        try:
            written = os.write(self._fd, frame)
            if written != len(frame):
                raise OSError(f"short write ({written} of {len(frame)} bytes)")
        except OSError as e:
            # A torn frame ends what the next resume trusts; frames after it would not be read, so stop.
            _note(self.path, e)
            os.close(self._fd)
            self._fd = None
            return
        self._claims = ClaimBuffer()
        self._written = self._line


_ROW, _BAD = "row", "bad"


def _frame_claims(path: Path, offset: int) -> np.ndarray:
    """The claims of the frames from byte `offset` of the checkpoint on (this run's own, all sound: it wrote them)."""
    parts = []
    with open(path, "rb") as f:
        f.seek(offset)
        while (fields := _next_head(f, strict=True)) is not None:
            payload = f.read(fields[1] * CLAIM_DTYPE.itemsize)
            if len(payload) != fields[1] * CLAIM_DTYPE.itemsize or zlib.crc32(payload) != fields[9]:
                raise OSError(f"frame at byte {f.tell() - len(payload) - _HEAD} is torn")
            parts.append(np.frombuffer(payload, dtype=CLAIM_DTYPE))
    return np.concatenate(parts) if parts else np.empty(0, dtype=CLAIM_DTYPE)


def _note(path: Path, e: OSError) -> None:
    log.warning(
        f"resume checkpoint {path} not updated ({e.strerror or e}); the next resume reads the whole prompt file"
    )
