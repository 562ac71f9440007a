"""The done set on disk (`results.done`): a resume maps the table it left instead of rebuilding it.

Rebuilding the done set from the key index reads 20 bytes a result and inserts every key again, a
cost that grows with the results (BENCHMARKS.md, "issue 26"); the snapshot is the table itself (three 64-bit words
a slot, as doneset.py holds it), the row-error lines and the samples >= 64, written whole. A resume
maps it copy-on-write: only the pages its lookups touch are read, and its own inserts never reach
the file.

What a snapshot says, and how it is checked before it is used (anything else: ignored, and the done
set is read from the key index and the results as without it):
- it holds exactly the results and errors up to their recorded ends, each end with the CRC of the
  line ending there (the journal's fsynced `ends`, the same tie as the resume checkpoint's frames):
  results or errors cut, replaced or set aside (--retry-errors) make it stale;
- the key index was level with those results: its length then, and a CRC of its last 64 KiB; the
  resume reads only the index frames after that length (and the results after the index's end);
- a header CRC32 and an XXH3-64 of the whole body (chosen as fast enough to check on every resume,
  where a CRC32 of the body would not be: BENCHMARKS.md, "issue 26"): a torn or bit-flipped file is
  never used.
Written by the journal after a commit (when the done set equals the disk), at most every
`Journal.snapshot_every_s`, and at the end of a run; to a temporary file renamed over the old one,
not fsynced: a snapshot lost or torn by a crash costs the rebuild, never a row.
"""

from __future__ import annotations

import mmap
import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import xxhash

from fleetgen.atomic import atomic_file
from fleetgen.generate.journal.keyindex import KEY_DTYPE, keys_array, last_line_crc, tail_crc
from fleetgen.rows.doneset import DoneSet

_MAGIC = b"FGDONE1\n"
# table log2 slots, occupied slots, results, errors, results end and its line's CRC, errors end and
# its line's CRC, key index length and the CRC of its tail, row-error lines, wide samples, XXH3 of the body
_HEAD = struct.Struct("<IQQQQIQIQIQQQ")
_CRC = struct.Struct("<I")
_BLOCK = 4096  # the header's block: the table starts page-aligned, so it maps as it is


def snapshot_name(suffix: str = "") -> str:
    return f"results{suffix}.done"


@dataclass
class Snapshot:
    done: DoneSet
    results_end: int
    errors_end: int
    index: tuple[int, int, int]  # (key index length, results end, CRC of its line): where read_index goes on


def save(path: Path, done: DoneSet, ends: tuple[int, int, int, int], index_len: int, index_tail: int) -> None:
    """Write the snapshot of `done`, which must hold exactly the journal up to `ends` (temporary file, rename)."""
    table = done.table
    bad = np.array(sorted(done.bad_lines), dtype="<u8").tobytes()
    w = sorted(done.wide)
    wide = keys_array([h for h, _ in w], [s for _, s in w])
    body = xxhash.xxh3_64()
    for part in (table, bad, wide.tobytes()):
        body.update(part)
    r_end, r_crc, e_end, e_crc = ends
    bits = (len(table) // 24).bit_length() - 1
    head = _seal(
        _MAGIC
        + _HEAD.pack(
            bits,
            done.ids,
            done.results,
            done.errors,
            r_end,
            r_crc,
            e_end,
            e_crc,
            index_len,
            index_tail,
            len(done.bad_lines),
            len(wide),
            body.intdigest(),
        )
    )
    with atomic_file(path, durable=False) as f:  # not fsynced: see the module's docstring
        f.write(head)
        f.write(table)
        f.write(bad)
        f.write(wide.tobytes())


# Why the last load returned None (for benchmarks and debugging; a resume just reads the done set then).
last_refusal = ""


def _refuse(why: str) -> None:
    global last_refusal
    last_refusal = why


def load(path: Path, results: Path, errors: Path, index: Path) -> Snapshot | None:
    """The snapshot at `path` when whole and still true of these files; None otherwise (read the done set instead)."""
    _refuse("")
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < _BLOCK:
                return _refuse("shorter than its header")
            m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    except FileNotFoundError:
        return _refuse("missing")
    except (ValueError, OSError) as e:
        return _refuse(f"cannot map it: {e}")
    head = m[:_BLOCK]
    if head[: len(_MAGIC)] != _MAGIC or zlib.crc32(head[: -_CRC.size]) != _CRC.unpack_from(head, _BLOCK - _CRC.size)[0]:
        return _refuse("header CRC")
    (bits, n, n_results, n_errors, r_end, r_crc, e_end, e_crc, index_len, index_tail, n_bad, n_wide, body_hash) = (
        _HEAD.unpack_from(head, len(_MAGIC))
    )
    table_bytes = 24 << bits
    if bits > 40 or size != _BLOCK + table_bytes + 8 * n_bad + KEY_DTYPE.itemsize * n_wide:
        return _refuse("size")
    view = memoryview(m)
    if xxhash.xxh3_64_intdigest(view[_BLOCK:]) != body_hash:
        return _refuse("body checksum")
    for file, end, crc in ((results, r_end, r_crc), (errors, e_end, e_crc)):
        if end and last_line_crc(file, end) != crc:
            return _refuse(f"stale: {file.name} changed")  # the file no longer starts with what the snapshot holds
    if tail_crc(index, index_len) != index_tail:
        return _refuse("stale: key index rewritten or cut")  # the snapshot cannot say where to read it on
    at = _BLOCK + table_bytes
    bad = np.frombuffer(m, dtype="<u8", count=n_bad, offset=at).tolist()
    wide = np.frombuffer(m, dtype=KEY_DTYPE, count=n_wide, offset=at + 8 * n_bad)
    wide_set = {(int(hi) << 64 | int(lo), int(s)) for lo, hi, s in zip(wide["lo"], wide["hi"], wide["sample"])}
    try:
        done = DoneSet.over(view[_BLOCK:at].cast("Q"), n, wide_set, set(bad), n_results, n_errors)
    except ValueError:
        return _refuse("table shape")
    return Snapshot(done, r_end, e_end, (index_len, r_end, r_crc))


def _seal(fields: bytes) -> bytes:
    """The header block: the fields, zero padding, and a CRC32 of all of it in its last 4 bytes (no unchecked byte)."""
    block = fields.ljust(_BLOCK - _CRC.size, b"\0")
    return block + _CRC.pack(zlib.crc32(block))
