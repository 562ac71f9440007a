"""Which (id, sample) pairs are recorded, in flat arrays keyed by a 128-bit hash of the id.

A dict of str -> int costs several times more per id than the id (BENCHMARKS.md, scale); here an id costs one slot of
three 64-bit words (hash low, hash high, sample bits) in an open-addressing table with linear
probing at most 3/4 full: 32-64 bytes per id, whatever the id's length. Samples 0-63 are bits of
the slot; higher sample numbers (rare) live in a small set beside it. The hash is BLAKE2b-128 of
the id's UTF-8 bytes: stable across processes, so the key index (keyindex.py) stores it, and wide
enough that a collision among 10M ids has a probability near 1e-25.

A done set over a mapped snapshot (`over`, donefile.py) never writes its table: a write to a private
mapping copies the page it lands on, and the keys a resume adds (the index frames after the snapshot,
then each new result) land on random pages, so 200K of them copied most of a 400 MB table
(BENCHMARKS.md, "figures the code cites"). They go into a small
table of their own (the tail) instead, and a lookup reads both.
The two become one table when the whole table is wanted (a snapshot written, a copy).
"""

from __future__ import annotations

from array import array
from collections.abc import Set as AbstractSet
from hashlib import blake2b

import numpy as np

from fleetgen.rows.idhash import id_hash

U64 = (1 << 64) - 1  # the low half of a 128-bit key
_MIN_BITS = 12
CHUNK = 1 << 20  # keys per bulk insert


def _bits_for(n: int) -> int:
    """Table size (log2) that holds n ids at most 2/3 full (10M ids: 2^24 slots, 400 MB)."""
    return max(_MIN_BITS, (3 * n // 2 + 1).bit_length())


class DoneSet:
    """Recorded (id, sample) pairs; bad_lines are prompt lines recorded as row-level input errors."""

    def __init__(self, bits: int = _MIN_BITS) -> None:
        self._alloc(bits)
        self._n = 0  # occupied slots (ids with at least one sample below 64)
        self._tail: DoneSet | None = None  # keys added over a mapped table (over()), none of them in it
        self._wide: set[tuple[int, int]] = set()  # (hash, sample) for sample >= 64
        self.bad_lines: set[int] = set()
        self.results = 0
        self.errors = 0

    def _alloc(self, bits: int) -> None:
        size = 1 << bits
        self._mask = size - 1
        # One array, three words a slot side by side (hash low, hash high, sample bits; bits 0 = empty),
        # so a probe touches one cache line.
        self._t = array("Q", [0]) * (3 * size)

    def _view(self) -> np.ndarray:
        """The table as a (slots, 3) numpy array over the same memory."""
        return np.frombuffer(self._t, dtype=np.uint64).reshape(-1, 3)

    def _slot(self, h: int) -> int:
        """The slot holding hash h, or the empty slot where it would go."""
        lo, hi = h & U64, h >> 64
        t, mask = self._t, self._mask
        i = lo & mask
        while t[3 * i + 2]:
            if t[3 * i] == lo and t[3 * i + 1] == hi:
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
        j = 3 * self._slot(h)
        t = self._t
        old = t[j + 2]
        bit = 1 << sample
        if old & bit:
            return False
        if self._tail is not None:  # a mapped table: the key goes to the tail
            return self._tail.add_hash(h, sample)
        if not old:
            t[j], t[j + 1] = h & U64, h >> 64
            self._n += 1
        t[j + 2] = old | bit
        if 4 * self._n > 3 * self._mask:
            self._rebuild(self._mask.bit_length() + 1)  # .bit_length() of the mask: the table's log2 size
        return True

    def __contains__(self, key: tuple[str, int]) -> bool:
        rid, sample = key
        return self.has_hash(id_hash(rid), sample)

    def has_hash(self, h: int, sample: int) -> bool:
        """(id, sample) is recorded, for an id whose hash (id_hash) the caller already has."""
        if sample >= 64:
            return (h, sample) in self._wide
        return bool(self._bits(h) >> sample & 1)

    @property
    def empty(self) -> bool:
        """No (id, sample) is recorded."""
        return not self.ids and not self._wide

    def _bits(self, h: int) -> int:
        """The sample bits (0-63) recorded for hash h, in the table and its tail."""
        bits = self._t[3 * self._slot(h) + 2]
        return bits if self._tail is None else bits | self._tail._bits(h)

    def has_all(self, rid: str, samples: int) -> bool:
        """Whether samples 0 to samples-1 of `rid` are all recorded (one hash and one probe, for the skip pass)."""
        if not self._n:
            return False  # a fresh run: no hash needed
        return self.has_all_hash(
            int.from_bytes(blake2b(rid.encode("utf-8", "surrogatepass"), digest_size=16).digest(), "little"), samples
        )

    def has_all_hash(self, h: int, samples: int) -> bool:
        """has_all for an id whose hash (id_hash) the caller already has."""
        lo, hi = h & U64, h >> 64
        t, mask = self._t, self._mask
        want = (1 << min(samples, 64)) - 1
        i = lo & mask
        while True:  # _slot, inlined: this runs once per prompt row of a resume
            j = 3 * i
            bits = t[j + 2]
            if not bits or t[j] == lo and t[j + 1] == hi:
                break  # empty (bits 0: not in the table) or found
            i = (i + 1) & mask
        if bits & want != want:
            tail = self._tail
            if tail is None:
                return False
            bits |= _probe_bits(tail._t, tail._mask, lo, hi)
            if bits & want != want:
                return False
        return samples <= 64 or all((h, k) in self._wide for k in range(64, samples))

    def __len__(self) -> int:
        return self.results + self.errors

    @property
    def ids(self) -> int:
        """Ids with a sample below 64 recorded (has_all is False for every id while this is 0).

        Over a mapped table, an id with samples in both the table and its tail counts twice.
        """
        return self._n if self._tail is None else self._n + self._tail._n

    @property
    def nbytes(self) -> int:
        """Memory held by the table (the wide set not counted)."""
        return 3 * 8 * (self._mask + 1)

    def copy(self) -> DoneSet:
        self._merge_tail()
        other = DoneSet.__new__(DoneSet)
        other._mask, other._n, other._tail = self._mask, self._n, None
        other._t = array("Q")
        other._t.frombytes(self.table)  # one copy of the buffer (the table may be a mapped snapshot, see donefile.py)
        other._wide, other.bad_lines = set(self._wide), set(self.bad_lines)
        other.results, other.errors = self.results, self.errors
        return other

    # --- a snapshot on disk (donefile.py): the table as it is, so a resume need not rebuild it -------

    @property
    def table(self) -> memoryview:
        """The slots as bytes (three 64-bit words a slot), for writing as they are (the tail merged in first)."""
        self._merge_tail()
        return memoryview(self._t).cast("B")

    @classmethod
    def over(
        cls, table: memoryview, n: int, wide: set[tuple[int, int]], bad_lines: set[int], results: int, errors: int
    ) -> DoneSet:
        """A done set whose table is `table` (64-bit words, 3 a slot, a power of two slots), used in place, not copied.

        `table` may be a private (copy-on-write) mapping of a snapshot file: only the pages a
        resume touches are read, and a write changes this process's copy, never the file.
        """
        slots = len(table) // 3
        if slots < 1 << _MIN_BITS or slots & (slots - 1) or len(table) != 3 * slots:
            raise ValueError(f"a done-set table of {len(table)} words is not 3 x a power of two slots")
        done = cls.__new__(cls)
        done._t, done._mask, done._n, done._tail = table, slots - 1, n, DoneSet()
        done._wide, done.bad_lines, done.results, done.errors = wide, bad_lines, results, errors
        return done

    # --- bulk: numpy builds the table from many keys at once (the key index, a growing table) ---------

    def reserve(self, ids: int) -> None:
        """Size the table for `ids` ids up front (a resume knows the count from the index), so it need not grow."""
        if 3 * (self._mask + 1) < 4 * ids:
            self._rebuild(_bits_for(ids))

    def add_many(self, lo: np.ndarray, hi: np.ndarray, sample: np.ndarray) -> int:
        """Add many (hash, sample) keys at once, a chunk at a time; returns how many pairs were new.

        Memory stays the table plus one chunk's temporaries (~100 MB), however many keys come in.
        """
        new = 0
        for start in range(0, len(lo), CHUNK):
            new += self._insert(
                *(np.ascontiguousarray(a[start : start + CHUNK], dtype=np.uint64) for a in (lo, hi, sample))
            )
        return new

    def _insert(self, lo: np.ndarray, hi: np.ndarray, sample: np.ndarray) -> int:
        new = 0
        wide = sample >= 64
        if wide.any():
            for w_lo, w_hi, w_s in zip(lo[wide].tolist(), hi[wide].tolist(), sample[wide].tolist()):
                if (w_hi << 64 | w_lo, w_s) not in self._wide:
                    self._wide.add((w_hi << 64 | w_lo, w_s))
                    new += 1
            lo, hi, sample = lo[~wide], hi[~wide], sample[~wide]
        lo, hi, bits = _distinct(lo, hi, np.left_shift(np.uint64(1), sample))
        into = self
        if self._tail is not None:  # a mapped table: what it lacks goes to the tail
            bits &= ~self._bits_many(lo, hi)
            lo, hi, bits = (a[bits != 0] for a in (lo, hi, bits))
            into = self._tail
        if 4 * (into._n + len(lo)) > 3 * (into._mask + 1):
            into._rebuild(_bits_for(into._n + len(lo)))
        return new + into._probe_in(lo, hi, bits)

    def _bits_many(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """The table's sample bits for many keys (0 where absent), read only: probing as _slot does, all at once."""
        mask = np.uint64(self._mask)
        view = self._view()
        t_lo, t_hi, t_bits = view[:, 0], view[:, 1], view[:, 2]
        out = np.zeros(len(lo), dtype=np.uint64)
        at = np.argsort(lo & mask)  # in slot order: the probes walk the table front to back (faster: BENCHMARKS.md)
        pos = lo[at] & mask
        while len(at):
            cur = t_bits[pos]
            hit = (cur != 0) & (t_lo[pos] == lo[at]) & (t_hi[pos] == hi[at])
            out[at[hit]] = cur[hit]
            go = (cur != 0) & ~hit
            at, pos = at[go], (pos[go] + np.uint64(1)) & mask
        return out

    def _merge_tail(self) -> None:
        """Make the mapped table and its tail one table of this
        process's own (a copy of the mapping, the tail added)."""
        tail = self._tail
        if tail is None:
            return
        own = array("Q")
        own.frombytes(memoryview(self._t).cast("B"))
        self._t, self._tail = own, None
        lo, hi, bits = tail.occupied()
        if 4 * (self._n + len(lo)) > 3 * (self._mask + 1):
            self._rebuild(_bits_for(self._n + len(lo)))
        for start in range(0, len(lo), CHUNK):
            self._probe_in(lo[start : start + CHUNK], hi[start : start + CHUNK], bits[start : start + CHUNK])

    def _probe_in(self, lo: np.ndarray, hi: np.ndarray, bits: np.ndarray) -> int:
        """Insert distinct keys by linear probing, all at once: returns the pairs that were new.

        In round k each key not yet settled looks at slot (home + k) & mask: the same key there takes
        its bits; an empty slot is taken by one of the keys that reached it (the others go on). A key
        that settles in round k has found slots home..home+k-1 taken by other keys, exactly what
        `_slot` walks through when it probes one slot at a time.
        """
        mask = np.uint64(self._mask)
        view = self._view()
        t_lo, t_hi, t_bits = view[:, 0], view[:, 1], view[:, 2]
        pos = lo & mask
        new = 0
        while len(lo):
            cur = t_bits[pos]
            same = (cur != 0) & (t_lo[pos] == lo) & (t_hi[pos] == hi)
            if same.any():
                at, add = pos[same], bits[same]
                new += int(np.bitwise_count(add & ~cur[same]).sum())
                t_bits[at] = cur[same] | add
            free_at = np.flatnonzero(cur == 0)
            if len(free_at):
                slots, first = np.unique(pos[free_at], return_index=True)
                won = free_at[first]
                t_lo[slots], t_hi[slots], t_bits[slots] = lo[won], hi[won], bits[won]
                new += int(np.bitwise_count(bits[won]).sum())
                self._n += len(won)
                same[won] = True
            keep = ~same
            lo, hi, bits = lo[keep], hi[keep], bits[keep]
            pos = (pos[keep] + np.uint64(1)) & mask
        return new

    def pairs(self) -> int:
        """(id, sample) pairs recorded."""
        self._merge_tail()
        return int(np.bitwise_count(self._view()[:, 2]).sum()) + len(self._wide)

    def occupied(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The table's used slots: id hash low and high words, and the bits of samples 0..63 (the tail merged in)."""
        self._merge_tail()
        view = self._view()
        used = view[:, 2] != 0
        return view[used, 0], view[used, 1], view[used, 2]

    @property
    def wide(self) -> AbstractSet[tuple[int, int]]:
        """(id hash, sample) of each sample 64 and up, which the table's 64 bits cannot hold."""
        return self._wide

    def _rebuild(self, bits: int) -> None:
        """Move every id into a table of 2**bits slots (numpy, a chunk at a time; not one by one in Python)."""
        old = self._view()
        self._alloc(bits)
        self._n = 0
        used = np.flatnonzero(old[:, 2])
        for start in range(0, len(used), CHUNK):
            at = used[start : start + CHUNK]
            self._probe_in(old[at, 0], old[at, 1], old[at, 2])


def _probe_bits(t: array, mask: int, lo: int, hi: int) -> int:
    """The sample bits of key (lo, hi) in table t, 0 when absent (what _slot walks, for has_all_hash's tail)."""
    i = lo & mask
    while True:
        j = 3 * i
        bits = t[j + 2]
        if not bits or t[j] == lo and t[j + 1] == hi:
            return bits
        i = (i + 1) & mask


def _distinct(lo: np.ndarray, hi: np.ndarray, bits: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One entry per (lo, hi) key, its sample bits merged.

    Sorted by the low word; two ids with the same low word and different high words (about 1 in
    2^64 per pair) could interleave, and then the sort is by both words.
    """
    order = np.argsort(lo)
    lo, hi, bits = lo[order], hi[order], bits[order]
    same_lo = lo[1:] == lo[:-1]
    if (same_lo & (hi[1:] != hi[:-1])).any():
        order = np.lexsort((hi, lo))
        lo, hi, bits = lo[order], hi[order], bits[order]
        same_lo = lo[1:] == lo[:-1]
    same = same_lo & (hi[1:] == hi[:-1])
    if same.any():
        starts = np.flatnonzero(np.concatenate([[True], ~same]))
        lo, hi, bits = lo[starts], hi[starts], np.bitwise_or.reduceat(bits, starts)
    return lo, hi, bits
