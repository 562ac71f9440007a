"""Which (id, sample) pairs are recorded, in flat arrays keyed by a 128-bit hash of the id.

A dict of str -> int costs ~110 bytes per id (over 1 GB at 10M); here an id costs one slot of
three 64-bit words (hash high, hash low, sample bits) in an open-addressing table with linear
probing at most 3/4 full: 32-64 bytes per id, whatever the id's length. Samples 0-63 are bits of
the slot; higher sample numbers (rare) live in a small set beside it. The hash is BLAKE2b-128 of
the id's UTF-8 bytes: stable across processes, so the key index (keyindex.py) stores it, and wide
enough that a collision among 10M ids has a probability near 1e-25.
"""

from __future__ import annotations

from array import array
from hashlib import blake2b

import numpy as np

_U64 = (1 << 64) - 1
_MIN_BITS = 12


def id_hash(rid: str) -> int:
    """The 128-bit key of an id (high 64 bits, low 64 bits as one int)."""
    return int.from_bytes(blake2b(rid.encode("utf-8", "surrogatepass"), digest_size=16).digest(), "little")


def _bits_for(n: int) -> int:
    """Table size (log2) that holds n ids at most 2/3 full (10M ids: 2^24 slots, 400 MB)."""
    return max(_MIN_BITS, (3 * n // 2 + 1).bit_length())


class DoneSet:
    """Recorded (id, sample) pairs; bad_lines are prompt lines recorded as row-level input errors."""

    def __init__(self, bits: int = _MIN_BITS) -> None:
        self._alloc(bits)
        self._n = 0  # occupied slots (ids with at least one sample below 64)
        self._wide: set[tuple[int, int]] = set()  # (hash, sample) for sample >= 64
        self.bad_lines: set[int] = set()
        self.results = 0
        self.errors = 0

    def _alloc(self, bits: int) -> None:
        size = 1 << bits
        self._mask = size - 1
        self._hi = array("Q", [0]) * size
        self._lo = array("Q", [0]) * size
        self._bits = array("Q", [0]) * size  # 0 marks an empty slot

    def _slot(self, h: int) -> int:
        """The slot holding hash h, or the empty slot where it would go."""
        lo, hi = h & _U64, h >> 64
        los, his, bits, mask = self._lo, self._hi, self._bits, self._mask
        i = lo & mask
        while bits[i]:
            if los[i] == lo and his[i] == hi:
                return i
            i = (i + 1) & mask
        return i

    def add(self, rid: str, sample: int) -> bool:
        """Mark (rid, sample) done; False when it already was."""
        return self.add_hash(id_hash(rid), sample)

    def add_hash(self, h: int, sample: int) -> bool:
        if sample >= 64:
            if (h, sample) in self._wide:
                return False
            self._wide.add((h, sample))
            return True
        i = self._slot(h)
        old = self._bits[i]
        bit = 1 << sample
        if old & bit:
            return False
        if not old:
            self._lo[i], self._hi[i] = h & _U64, h >> 64
            self._n += 1
        self._bits[i] = old | bit
        if 4 * self._n > 3 * self._mask:
            self._rebuild(self._mask.bit_length() + 1)  # .bit_length() of the mask: the table's log2 size
        return True

    def __contains__(self, key: tuple[str, int]) -> bool:
        rid, sample = key
        h = id_hash(rid)
        if sample >= 64:
            return (h, sample) in self._wide
        return bool(self._bits[self._slot(h)] >> sample & 1)

    def has_all(self, rid: str, samples: int) -> bool:
        """Whether samples 0 to samples-1 of `rid` are all recorded (one hash and one probe, for the skip pass)."""
        h = id_hash(rid)
        mask = (1 << min(samples, 64)) - 1
        if self._bits[self._slot(h)] & mask != mask:
            return False
        return samples <= 64 or all((h, k) in self._wide for k in range(64, samples))

    def __len__(self) -> int:
        return self.results + self.errors

    @property
    def nbytes(self) -> int:
        """Memory held by the table's arrays (the wide set not counted)."""
        return 3 * 8 * (self._mask + 1)

    def copy(self) -> DoneSet:
        other = DoneSet.__new__(DoneSet)
        other._mask, other._n = self._mask, self._n
        other._hi, other._lo, other._bits = array("Q", self._hi), array("Q", self._lo), array("Q", self._bits)
        other._wide, other.bad_lines = set(self._wide), set(self.bad_lines)
        other.results, other.errors = self.results, self.errors
        return other

    # --- bulk: numpy builds the table from many keys at once (the key index, a growing table) ---------

    def add_many(self, lo: np.ndarray, hi: np.ndarray, sample: np.ndarray) -> int:
        """Add many (hash, sample) keys at once; returns how many pairs were new."""
        lo, hi, sample = (np.asarray(a, dtype=np.uint64) for a in (lo, hi, sample))
        before = self._pairs()
        wide = sample >= 64
        if wide.any():
            for w_lo, w_hi, w_s in zip(lo[wide].tolist(), hi[wide].tolist(), sample[wide].tolist()):
                self._wide.add((w_hi << 64 | w_lo, w_s))
            lo, hi, sample = lo[~wide], hi[~wide], sample[~wide]
        occupied = self._occupied()
        keys_lo = np.concatenate([occupied[0], lo])
        keys_hi = np.concatenate([occupied[1], hi])
        bits = np.concatenate([occupied[2], np.left_shift(np.uint64(1), sample)])
        # One id per key: sort by the low word, merge equal keys' sample bits. Two ids with the same low
        # word and different high words (about 1 in 2^64 per pair) could interleave: then sort by both.
        order = np.argsort(keys_lo)
        keys_lo, keys_hi, bits = keys_lo[order], keys_hi[order], bits[order]
        same_lo = keys_lo[1:] == keys_lo[:-1]
        if (same_lo & (keys_hi[1:] != keys_hi[:-1])).any():
            order = np.lexsort((keys_hi, keys_lo))
            keys_lo, keys_hi, bits = keys_lo[order], keys_hi[order], bits[order]
            same_lo = keys_lo[1:] == keys_lo[:-1]
        same = same_lo & (keys_hi[1:] == keys_hi[:-1])
        if same.any():
            starts = np.flatnonzero(np.concatenate([[True], ~same]))
            keys_lo, keys_hi, bits = keys_lo[starts], keys_hi[starts], np.bitwise_or.reduceat(bits, starts)
        self._place(keys_lo, keys_hi, bits)
        return self._pairs() - before

    def _pairs(self) -> int:
        return int(np.bitwise_count(np.frombuffer(self._bits, dtype=np.uint64)).sum()) + len(self._wide)

    def _occupied(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        bits = np.frombuffer(self._bits, dtype=np.uint64)
        used = bits != 0
        return np.frombuffer(self._lo, dtype=np.uint64)[used], np.frombuffer(self._hi, dtype=np.uint64)[used], bits[used]

    def _rebuild(self, bits: int) -> None:
        """Grow the table: every slot placed again by numpy, not one by one in Python."""
        lo, hi, b = (a.copy() for a in self._occupied())
        self._place(lo, hi, b, bits)

    def _place(self, lo: np.ndarray, hi: np.ndarray, bits: np.ndarray, table_bits: int = 0) -> None:
        """Put distinct keys into a fresh table at most 2/3 full (or of table_bits, if larger).

        Inserting keys in order of their home slot, linear probing puts key i at
        p_i = max(home_i, p_(i-1) + 1), i.e. p = i + running max of (home - i): one sort and one
        cumulative max. The few that run past the table's end wrap to its start, one by one.
        """
        n = len(lo)
        self._alloc(max(_bits_for(n), table_bits))
        mask = self._mask
        order = np.argsort(lo & np.uint64(mask), kind="stable")
        lo, hi, bits = lo[order], hi[order], bits[order]
        rank = np.arange(n, dtype=np.int64)
        pos = rank + np.maximum.accumulate((lo & np.uint64(mask)).astype(np.int64) - rank) if n else rank
        inside = pos <= mask
        t_lo = np.frombuffer(self._lo, dtype=np.uint64)
        t_hi = np.frombuffer(self._hi, dtype=np.uint64)
        t_bits = np.frombuffer(self._bits, dtype=np.uint64)
        at = pos[inside]
        t_lo[at], t_hi[at], t_bits[at] = lo[inside], hi[inside], bits[inside]
        self._n = int(inside.sum())
        for w_lo, w_hi, w_bits in zip(lo[~inside].tolist(), hi[~inside].tolist(), bits[~inside].tolist()):
            i = 0  # their probe has run through the table's end: continue from slot 0
            while self._bits[i]:
                i += 1
            self._lo[i], self._hi[i], self._bits[i] = w_lo, w_hi, w_bits
            self._n += 1
