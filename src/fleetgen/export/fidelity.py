"""How far a text round trip strays from the tokens the target sampled: decode, re-encode, compare.

A decoded text re-encodes to the tokenizer's canonical tokenization, not necessarily to the ids the
target sampled (sampled `' pian' 'ist'`, re-encoded `' pianist'`). For each turn with recorded ids,
the sampled completion (without its closing special token) is decoded and re-encoded; the turn
differs when the two id lists differ, and the affected tokens are the sampled ids outside the
longest matching blocks of the two lists. Every differing turn is off-policy in an export built
from text, which is why the tokens export uses the ids.
"""

from __future__ import annotations

from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Any

from fleetgen.rows.token_ids import recorded_turns


@dataclass
class Mismatch:
    """Counts over turns with recorded ids."""

    turns: int = 0
    turns_differing: int = 0
    tokens: int = 0
    tokens_affected: int = 0

    def add(self, other: Mismatch) -> None:
        self.turns += other.turns
        self.turns_differing += other.turns_differing
        self.tokens += other.tokens
        self.tokens_affected += other.tokens_affected

    @property
    def turn_share(self) -> float:
        return self.turns_differing / self.turns if self.turns else 0.0

    @property
    def token_share(self) -> float:
        return self.tokens_affected / self.tokens if self.tokens else 0.0


def affected(sampled: list[int], other: list[int]) -> int:
    """Sampled ids not in the longest matching blocks of the two lists."""
    if sampled == other:
        return 0
    blocks = SequenceMatcher(None, sampled, other, autojunk=False).get_matching_blocks()
    return len(sampled) - sum(b.size for b in blocks)


def turn_mismatch(completion: list[int], tok: Any) -> Mismatch:
    """One sampled completion against the re-encoding of its decoded text."""
    special = set(tok.all_special_ids)
    ids = list(completion)
    while ids and ids[-1] in special:
        ids.pop()  # the end-of-turn token is a template token, not text
    text = tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
    again = tok(text, add_special_tokens=False)["input_ids"]
    n = affected(ids, again)
    return Mismatch(1, int(ids != again), len(ids), n)


def record_mismatch(rec: dict[str, Any], tok: Any) -> Mismatch:
    """The record's turns with recorded ids, each decoded and re-encoded."""
    out = Mismatch()
    try:
        turns = recorded_turns(rec) or []
    except (ValueError, TypeError, KeyError):
        return out
    for t in turns:
        if t is not None:
            out.add(turn_mismatch(t.completion, tok))
    return out
