"""The 128-bit key of a prompt id: the done set's key, and what splits a job into shards (no numpy here)."""

from __future__ import annotations

from hashlib import blake2b


def id_hash(rid: str) -> int:
    """The 128-bit key of an id (high 64 bits, low 64 bits as one int): BLAKE2b-128 of its UTF-8 bytes."""
    return int.from_bytes(blake2b(rid.encode("utf-8", "surrogatepass"), digest_size=16).digest(), "little")
