"""Dedup across all sources: exact (normalized user text) and near-duplicate (MinHash LSH, datasketch).

Both keep the first occurrence in recipe order (sources in the order listed, rows in file
order), so the same prompt in two datasets counts once, for the source listed first.

Near-duplicates: each prompt's word 3-gram shingles (at most `MAX_SHINGLES`) get a datasketch
MinHash signature; the signatures are kept as one uint32 matrix, and the LSH banding that
datasketch's `MinHashLSH` chooses for the threshold (b bands of r rows) is done over the whole
matrix at once with numpy. That keeps 1M signatures in ~256 MB instead of the several GB that
an in-memory MinHashLSH index of Python objects takes. Each bucket's members are compared to
its first member; a pair is a duplicate when the signatures agree on at least `threshold` of
their positions (the Jaccard estimate); duplicate clusters keep their earliest member.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
import zlib

import numpy as np

from fleetgen.rows.prompt import PromptRecord

MAX_SHINGLES = 2048
_SPACE = re.compile(r"\s+")
_WORD = re.compile(r"\w+", re.U)


def normalize_text(text: str) -> str:
    """NFKC, lower case, collapsed whitespace: the text two prompts must share to be exact duplicates."""
    return _SPACE.sub(" ", unicodedata.normalize("NFKC", text).lower()).strip()


def dedup_text(record: PromptRecord) -> str:
    """The user turns, plus the tool names: the same question against different tool sets is a different prompt."""
    text = normalize_text(record.user_text())
    if record.tools:
        text += "\x00" + ",".join(sorted(t["function"]["name"] for t in record.tools))
    return text


def exact_key(text: str) -> int:
    """64-bit hash of normalized text (collisions ~1e-8 at 1e6 rows)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little", signed=True)


class Signer:
    """MinHash signatures (datasketch, affine32 scheme) of a text's word 3-gram shingles."""

    def __init__(self, num_perm: int, seed: int = 1) -> None:
        self.num_perm = num_perm
        # imported here: it pulls in scipy, a cost every CLI start would pay (BENCHMARKS.md)
        from datasketch import MinHash

        # One MinHash reused per text: building one re-validates its permutations each time.
        self._m = MinHash(num_perm=num_perm, seed=seed, hashfunc=zlib.crc32)
        self._empty = self._m.hashvalues.copy()

    def sign(self, text: str) -> np.ndarray:
        words = _WORD.findall(text)
        if len(words) < 3:
            shingles = {" ".join(words).encode()} if words else {text.encode()}
        else:
            shingles = {" ".join(words[i : i + 3]).encode() for i in range(min(len(words) - 2, MAX_SHINGLES))}
        self._m.hashvalues = self._empty.copy()
        self._m.update_batch(shingles)
        return self._m.hashvalues.astype(np.uint32, copy=True)


def lsh_params(threshold: float, num_perm: int) -> tuple[int, int]:
    """(bands, rows per band) that datasketch's MinHashLSH picks for this threshold."""
    from datasketch import MinHashLSH

    lsh = MinHashLSH(threshold=threshold, num_perm=num_perm)
    return lsh.b, lsh.r


def near_duplicates(signatures: np.ndarray, threshold: float, chunk: int = 1 << 20) -> np.ndarray:
    """For each row, the index of the earlier row it near-duplicates, or -1 to keep it."""
    n, num_perm = signatures.shape
    parent = np.arange(n, dtype=np.int64)
    if n < 2:
        return np.full(n, -1, dtype=np.int64)
    bands, rows = lsh_params(threshold, num_perm)
    mult = np.array(
        [(0x9E3779B97F4A7C15 ^ (i * 0xBF58476D1CE4E5B9)) & 0xFFFFFFFFFFFFFFFF | 1 for i in range(rows)], dtype=np.uint64
    )
    need = int(np.ceil(threshold * num_perm))
    pairs: list[tuple[np.ndarray, np.ndarray]] = []
    with np.errstate(over="ignore"):
        for b in range(bands):
            block = signatures[:, b * rows : (b + 1) * rows].astype(np.uint64)
            keys = (block * mult).sum(axis=1, dtype=np.uint64)
            order = np.argsort(keys, kind="stable")
            sk = keys[order]
            starts = np.r_[True, sk[1:] != sk[:-1]]
            group_first = order[np.maximum.accumulate(np.where(starts, np.arange(n), 0))]
            member = order[~starts]
            first = group_first[~starts]
            for lo in range(0, len(member), chunk):
                a, c = first[lo : lo + chunk], member[lo : lo + chunk]
                agree = (signatures[a] == signatures[c]).sum(axis=1)
                ok = agree >= need
                if ok.any():
                    pairs.append((a[ok], c[ok]))
    if not pairs:
        return np.full(n, -1, dtype=np.int64)
    a = np.concatenate([p[0] for p in pairs])
    c = np.concatenate([p[1] for p in pairs])
    for x, y in zip(a.tolist(), c.tolist()):  # union-find; the smaller index is the root
        rx, ry = _find(parent, x), _find(parent, y)
        if rx != ry:
            parent[max(rx, ry)] = min(rx, ry)
    out = np.full(n, -1, dtype=np.int64)
    for i in np.unique(np.concatenate([a, c])).tolist():
        root = _find(parent, i)
        if root != i:
            out[i] = root
    return out


def _find(parent: np.ndarray, x: int) -> int:
    root = x
    while parent[root] != root:
        root = int(parent[root])
    while parent[x] != root:
        parent[x], x = root, int(parent[x])
    return root
