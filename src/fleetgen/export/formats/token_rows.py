"""Token rows from the ids the server recorded: every supervised id was sampled, every context id was fed.

Each regenerated turn k has its prompt ids P_k (what the server was fed: the history as its chat
template rendered it) and completion ids C_k (what it sampled, end-of-turn token included). A row
is P_k + C_k with C_k supervised. Turns chain into one row while the next turn's prompt starts
with the previous row's ids exactly: then P_{k+1} + C_{k+1} holds C_k at the same place, as both
what the target sampled and what it was later fed, and C_k stays supervised there. Where the ids
disagree (the template re-renders an earlier turn: reasoning dropped from history, or a sampled
turn whose text re-encodes to other tokens), a new row starts, so no supervised id is one the
target did not sample and no context id is one the server was not fed. Split rows are named
`<prompt id>#<sample>/turn<k>` as in the text path, k the row's last assistant turn.

speculators writes one row per generation (P_k + C_k, k = 0..n-1), which repeats the history n
times; chaining writes it once where that is exact, and `rows_per_generation` gives speculators'
layout for its format.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fleetgen.rows.markup import THINK_CLOSE
from fleetgen.rows.token_ids import TurnIds


@dataclass(frozen=True)
class IdRow:
    """One row's ids, its loss mask, and the index of its last assistant turn."""

    input_ids: list[int]
    loss_mask: list[int]
    last_turn: int


def _starts_with(seq: Sequence[int], prefix: Sequence[int]) -> bool:
    return len(seq) >= len(prefix) and seq[: len(prefix)] == prefix


def _mask(completion: list[int], think_close: int | None) -> list[int]:
    """1 over the sampled ids; with `think_close`, only those after the reasoning's closing token."""
    if think_close is None or think_close not in completion:
        return [1] * len(completion)
    cut = len(completion) - completion[::-1].index(think_close)
    return [0] * cut + [1] * (len(completion) - cut)


def chained_rows(turns: list[TurnIds], think_close: int | None = None) -> list[IdRow]:
    """Rows of chained turns: one row while each prompt extends the previous ids, a new one where not."""
    rows: list[IdRow] = []
    ids: list[int] = []
    mask: list[int] = []
    for k, t in enumerate(turns):
        if rows and not _starts_with(t.prompt, ids):
            ids, mask = [], []
        elif rows:
            rows.pop()  # this turn extends the last row: it replaces it
        mask = mask + [0] * (len(t.prompt) - len(ids)) + _mask(t.completion, think_close)
        ids = t.prompt + t.completion
        rows.append(IdRow(ids, mask, k))
    return rows


def rows_per_generation(turns: list[TurnIds], think_close: int | None = None) -> list[IdRow]:
    """One row per generation, prompt unsupervised: speculators' layout."""
    return [
        IdRow(t.prompt + t.completion, [0] * len(t.prompt) + _mask(t.completion, think_close), k)
        for k, t in enumerate(turns)
    ]


def think_close_id(tokenizer: object) -> int | None:
    """The id of `</think>` when the tokenizer has it as one token; None otherwise."""
    vocab = tokenizer.get_vocab()  # type: ignore[attr-defined]
    return vocab.get(THINK_CLOSE)
