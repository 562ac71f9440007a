"""A deterministic train/eval split by a stable hash of the prompt id: every sample of a prompt lands together."""

from __future__ import annotations

import hashlib


def eval_score(prompt_id: str, salt: str) -> float:
    """A number in [0, 1) fixed by (salt, id): the same on every machine, run and Python version."""
    digest = hashlib.sha256(f"{salt}\x00{prompt_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def split_of(prompt_id: str, fraction: float, salt: str) -> str:
    """'eval' for about `fraction` of ids, 'train' for the rest."""
    return "eval" if fraction > 0 and eval_score(prompt_id, salt) < fraction else "train"
