"""The claimed ids, sorted, beside the resume checkpoint (`resume.claims`): a resume maps them instead of sorting them.

The duplicate-id check of the rows past the watermark looks each id up among the ids claimed before
it (prefixclaims.PrefixClaims). The checkpoint's frames hold those claims in file order: every resume
would read them, 20 bytes a row, and sort them, a cost that grows with the rows (BENCHMARKS.md,
"issue 26"). At the end of a run the checkpoint writes them once, sorted by id hash, as three flat
arrays (hash low, hash high, line) a resume maps and searches in place.

Which ids the rows before a line claim is a function of the prompt file and the job alone (each
owned, valid row whose id is seen there first claims it), so a snapshot taken at watermark line L
answers for any watermark W: below L, the claims with a line under W; past L, those plus the
checkpoint's own claims from line L on (checkpoint.py reads only those frames' claims). It is used
only with the same job digest as the checkpoint (prompt file sha256, samples, shard, fleetgen
version) and when its header CRC32 and the XXH3-64 of its body match; anything else: the claims are
read from the checkpoint frames, as without it. Replaced whole (fleetgen.atomic), not fsynced.
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

_MAGIC = b"FGCLAIM1"
# job digest (32 bytes), watermark line, claims, XXH3 of the body
_HEAD = struct.Struct("<32sQQQ")
_CRC = struct.Struct("<I")
_BLOCK = 4096


def claims_name(suffix: str = "") -> str:
    return f"resume{suffix}.claims"


@dataclass
class SortedClaims:
    """Claims sorted by hash low word (then high), each array over the mapped file: looked up in place."""

    line: int  # the watermark they were taken at: every claim of a line below it, none of a line at or past it
    lo: np.ndarray
    hi: np.ndarray
    lines: np.ndarray


def save(path: Path, digest: bytes, line: int, lo: np.ndarray, hi: np.ndarray, lines: np.ndarray) -> None:
    """Write claims (already sorted by `lo`) taken at watermark `line`."""
    parts = [
        np.ascontiguousarray(lo, dtype="<u8"),
        np.ascontiguousarray(hi, dtype="<u8"),
        np.ascontiguousarray(lines, dtype="<u4"),
    ]
    body = xxhash.xxh3_64()
    for a in parts:
        body.update(memoryview(a).cast("B"))
    head = _seal(_MAGIC + _HEAD.pack(digest, line, len(lo), body.intdigest()))
    with atomic_file(path, durable=False) as f:  # not fsynced: see the module's docstring
        f.write(head)
        for a in parts:
            f.write(memoryview(a).cast("B"))


def load(path: Path, digest: bytes) -> SortedClaims | None:
    """The snapshot at `path` when whole and this job's; None otherwise."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < _BLOCK:
                return None
            m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        return None
    head = m[:_BLOCK]
    if head[: len(_MAGIC)] != _MAGIC or zlib.crc32(head[: -_CRC.size]) != _CRC.unpack_from(head, _BLOCK - _CRC.size)[0]:
        return None
    got, line, n, body_hash = _HEAD.unpack_from(head, len(_MAGIC))
    if got != digest or size != _BLOCK + 20 * n:
        return None
    if xxhash.xxh3_64_intdigest(memoryview(m)[_BLOCK:]) != body_hash:
        return None
    lo = np.frombuffer(m, dtype="<u8", count=n, offset=_BLOCK)
    hi = np.frombuffer(m, dtype="<u8", count=n, offset=_BLOCK + 8 * n)
    lines = np.frombuffer(m, dtype="<u4", count=n, offset=_BLOCK + 16 * n)
    return SortedClaims(line, lo, hi, lines)


def _seal(fields: bytes) -> bytes:
    """The header block: the fields, zero padding, and a CRC32 of all of it in its last 4 bytes (no unchecked byte)."""
    block = fields.ljust(_BLOCK - _CRC.size, b"\0")
    return block + _CRC.pack(zlib.crc32(block))
