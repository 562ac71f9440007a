"""The ids claimed before the watermark, in memory: the lookup a resume asks and the compact buffer a run fills; apart
from the checkpoint file's format."""

from __future__ import annotations

from array import array

import numpy as np

from fleetgen.generate.journal.claimsfile import SortedClaims
from fleetgen.rows.doneset import U64

CLAIM_DTYPE = np.dtype([("lo", "<u8"), ("hi", "<u8"), ("line", "<u4")])  # 20 bytes a claimed id


class PrefixClaims:
    """The ids first seen before the watermark, with their lines; looked up by id hash (sorted on first use).

    With a claims snapshot (claimsfile.py), its sorted arrays answer for the lines below min(its
    line, `limit`) in place, and `claims` holds only the checkpoint's claims of the lines after it.
    """

    def __init__(self, claims: np.ndarray, snapshot: SortedClaims | None = None, limit: int = 0) -> None:
        self._claims = claims
        self._lo: np.ndarray | None = None
        self._snap, self._limit = snapshot, limit

    def __len__(self) -> int:
        return (len(self._claims) if self._lo is None else len(self._lo)) + (len(self._snap.lo) if self._snap else 0)

    def line_of_hash(self, h: int) -> int | None:
        """The line that claimed the id hashed `h` (id_hash) before the watermark, or None."""
        lo, hi = h & U64, h >> 64
        snap = self._snap
        if snap is not None:
            i = int(snap.lo.searchsorted(np.uint64(lo)))
            n = len(snap.lo)
            while i < n and int(snap.lo[i]) == lo:
                if int(snap.hi[i]) == hi:
                    line = int(snap.lines[i])
                    return line if line < self._limit else None  # an id is claimed once: not before the watermark
                i += 1
        if self._lo is None:
            if not len(self._claims):
                return None  # all in the snapshot (a resume after a graceful stop)
            self._sort()
        i = int(self._lo.searchsorted(np.uint64(lo)))
        n = len(self._lo)
        while i < n and int(self._lo[i]) == lo:
            if int(self._hi[i]) == hi:
                return int(self._line[i])
            i += 1
        return None

    def _sort(self) -> None:
        c = self._claims
        order = np.argsort(c["lo"], kind="stable")
        self._lo = np.ascontiguousarray(c["lo"][order])
        self._hi, self._line = c["hi"][order], c["line"][order]
        self._claims = None  # type: ignore[assignment]

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every claim before the watermark as (lo, hi, line) arrays, in no particular order (for a new snapshot)."""
        if self._lo is None:
            self._sort()
        parts = [(self._lo, self._hi, self._line)]
        snap = self._snap
        if snap is not None:
            if self._limit >= snap.line:
                parts.insert(0, (snap.lo, snap.hi, snap.lines))
            else:
                keep = snap.lines < self._limit
                parts.insert(0, (snap.lo[keep], snap.hi[keep], snap.lines[keep]))
        return tuple(np.concatenate([p[k] for p in parts]) for k in range(3))  # type: ignore[return-value]


class ClaimBuffer:
    """(id hash, line) pairs in flat arrays: 20 bytes a claim, not two Python ints in a list."""

    __slots__ = ("lo", "hi", "line")

    def __init__(self) -> None:
        self.lo, self.hi, self.line = array("Q"), array("Q"), array("I")

    def add(self, h: int, line: int) -> None:
        self.lo.append(h & U64)
        self.hi.append(h >> 64)
        self.line.append(line)

    def extend(self, other: ClaimBuffer | list[tuple[int, int]]) -> None:
        if isinstance(other, ClaimBuffer):
            self.lo.extend(other.lo)
            self.hi.extend(other.hi)
            self.line.extend(other.line)
        else:
            lo, hi, ln = self.lo.append, self.hi.append, self.line.append
            for h, line in other:
                lo(h & U64)
                hi(h >> 64)
                ln(line)

    def encode(self) -> bytes:
        claims = np.empty(len(self.line), dtype=CLAIM_DTYPE)
        claims["lo"] = np.frombuffer(self.lo, dtype=np.uint64)
        claims["hi"] = np.frombuffer(self.hi, dtype=np.uint64)
        claims["line"] = np.frombuffer(self.line, dtype=np.uint32)
        return claims.tobytes()
