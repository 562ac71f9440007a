"""The key index beside results.jsonl: the (id hash, sample) of
every result line, so a resume need not read the results.

Durability rule: a frame of keys is appended only after the result lines it names are written and
fsynced, so the index can lag the results but never lead them. Each frame says which byte range of
results.jsonl it covers and carries a CRC of its keys and of the last line of that range. Loading
keeps frames while they are whole, contiguous (each starts where the one before ended) and their
CRCs match; the last kept frame must end on a line of results.jsonl whose CRC it recorded. Whatever
the kept frames do not cover (a torn or lost frame, a kill between a results write and an index
write, a missing index) is read from results.jsonl itself; an index that does not match the
results at all (stale: another run's, or results cut or replaced) is dropped and rebuilt.
The index is not fsynced: losing its tail costs a rescan of that much of the results, never a row.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fleetgen.rows.doneset import U64

INDEX = "results.keys"
HEADER = b"FGKEYS1\n"
_MAGIC = b"KF01"
# magic, key count, results start and end offset, CRC32 of the results' last line in range, CRC32 of the keys
_FRAME = struct.Struct("<4sIQQII")
KEY_DTYPE = np.dtype([("lo", "<u8"), ("hi", "<u8"), ("sample", "<u4")])  # 20 bytes a key
FRAME_KEYS = 1 << 20  # keys per frame when a whole index is written at once
FRAME_HEAD = _FRAME.size  # bytes of a frame before its keys


def encode_frame(hashes: list[int], samples: list[int], start: int, end: int, last_line: bytes) -> bytes:
    """One frame: the keys of the result lines in bytes [start, end) of results.jsonl."""
    return encode_keys(keys_array(hashes, samples), start, end, last_line)


def keys_array(hashes: list[int], samples: list[int]) -> np.ndarray:
    """Keys as the index stores them: each 128-bit id hash split into its low and high 64 bits, with its sample."""
    keys = np.empty(len(hashes), dtype=KEY_DTYPE)
    keys["lo"] = [h & U64 for h in hashes]
    keys["hi"] = [h >> 64 for h in hashes]
    keys["sample"] = samples
    return keys


def encode_keys(keys: np.ndarray, start: int, end: int, last_line: bytes) -> bytes:
    payload = keys.tobytes()
    return _FRAME.pack(_MAGIC, len(keys), start, end, zlib.crc32(last_line), zlib.crc32(payload)) + payload


@dataclass
class Loaded:
    """What a key index says: its keys, the results byte range they cover, and the index bytes that are sound."""

    keys: np.ndarray  # empty when read_index handed them to on_keys
    end: int
    last_line_crc: int
    good_bytes: int  # the index file's length up to the last sound frame
    whole: bool  # every byte of the index file was a sound frame


def read_index(
    path: Path, on_keys: Callable[[np.ndarray], None] | None = None, start: tuple[int, int, int] | None = None
) -> Loaded | None:
    """The sound, contiguous frames of the index at `path`; None when it is missing or has no header.

    With on_keys, keys are handed over about a million at a time as they are read and not kept
    (Loaded.keys is then empty): memory stays one chunk, whatever the index's size.
    start (index byte offset, results offset, CRC of the results' line ending there): begin at a
    frame boundary known from elsewhere (a done-set snapshot, donefile.py) instead of the header;
    the frames before it are taken as read.
    """
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return None
    with f:
        if f.read(len(HEADER)) != HEADER:
            return None
        pos, end, crc = len(HEADER), 0, 0
        if start is not None:
            pos, end, crc = start
            f.seek(pos)
        parts: list[np.ndarray] = []
        pending = 0
        while True:
            head = f.read(_FRAME.size)
            if len(head) < _FRAME.size:
                break
            magic, n, f_start, f_end, line_crc, keys_crc = _FRAME.unpack(head)
            if magic != _MAGIC or f_start != end or f_end < f_start:
                break
            payload = f.read(n * KEY_DTYPE.itemsize)
            if len(payload) < n * KEY_DTYPE.itemsize or zlib.crc32(payload) != keys_crc:
                break
            parts.append(np.frombuffer(payload, dtype=KEY_DTYPE))
            pending += n
            pos, end, crc = pos + len(head) + len(payload), f_end, line_crc
            if on_keys is not None and pending >= FRAME_KEYS:
                on_keys(np.concatenate(parts))
                parts, pending = [], 0
        whole = pos == os.fstat(f.fileno()).st_size
    if on_keys is not None:
        if parts:
            on_keys(np.concatenate(parts))
        parts = []
    keys = np.concatenate(parts) if parts else np.empty(0, dtype=KEY_DTYPE)
    return Loaded(keys, end, crc, pos, whole)


def tail_crc(path: Path, end: int, size: int = 1 << 16) -> int | None:
    """CRC32 of the `size` bytes of `path` before byte `end` (fewer near its start); None when it is shorter."""
    try:
        with open(path, "rb") as f:
            if end > os.fstat(f.fileno()).st_size:
                return None
            begin = max(len(HEADER), end - size)
            f.seek(begin)
            return zlib.crc32(f.read(end - begin))
    except FileNotFoundError:
        return None


def matches_results(loaded: Loaded, results: Path) -> bool:
    """Whether the index's covered range is a prefix of these results: it ends on the very line it recorded."""
    return loaded.end == 0 or last_line_crc(results, loaded.end) == loaded.last_line_crc


def last_line_crc(path: Path, end: int) -> int | None:
    """CRC32 of the line of `path` that ends at byte `end` (newline included); None when no line ends there."""
    try:
        with open(path, "rb") as f:
            if end > os.fstat(f.fileno()).st_size:
                return None
            start = line_start(f, end)
            f.seek(start)
            line = f.read(end - start)
    except FileNotFoundError:
        return None
    return zlib.crc32(line) if line.endswith(b"\n") else None


def line_start(f, end: int) -> int:
    """Offset where the line ending at `end` (newline included) begins."""
    pos = end - 1
    block = 1 << 16
    while pos > 0:
        start = max(0, pos - block)
        f.seek(start)
        chunk = f.read(pos - start)
        nl = chunk.rfind(b"\n")
        if nl >= 0:
            return start + nl + 1
        pos = start
    return 0
