"""The token ids of each regenerated assistant turn, as a result row records them (packed) and readers unpack them.

The ids are raw: the tokens the engine sampled before its reasoning and tool-call parsers split
them into reasoning_content / content / tool_calls (a `<think>` block and a tool call's markup are
in them), and the ids of the templated prompt as the engine rendered it.

In the result record (`token_ids` field) each regenerated assistant turn is one entry, in the
order of the assistant messages: null where the server returned no ids, else
`{"prompt": P, "reuse": n, "completion": C}`. Where a turn is null, `why` (a list as long as
`turns`, null for the turns with ids) says why in one word (MISSING): `none` (the answer held no
ids), `mismatch` (ids whose count disagrees with the server's own usage count: not trusted),
`refused` (the endpoint refused the id fields, so they were not asked). Records written before
`why` existed have none; their null turns read as reason unknown. `reuse` leading prompt ids equal the previous
turn's prompt + completion ids and are not repeated (a multi-turn prompt re-sends the history);
`P` is the rest. P and C are packed: base64 of 3-byte little-endian unsigned ints (4 characters
per token; vocabularies up to 16.7M ids), or a plain JSON list if an id does not fit.
"""

from __future__ import annotations

import base64
import sys
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

ENCODING = "u24le-base64"
_MAX_ID = 1 << 24

# Why a regenerated turn has no ids: the code the record keeps (`why`), and what people read.
NONE_RETURNED, COUNT_MISMATCH, REFUSED = "none", "mismatch", "refused"
MISSING: dict[str | None, str] = {
    NONE_RETURNED: "none returned",
    COUNT_MISMATCH: "count mismatch",
    REFUSED: "refused",
    None: "reason not recorded (an older run)",
}


@dataclass(frozen=True)
class TurnIds:
    """The ids one completion was fed (`prompt`) and sampled (`completion`), as the server returned them."""

    prompt: list[int]
    completion: list[int]


def pack(ids: Sequence[int]) -> str | list[int]:
    """Ids as 4 base64 characters each (3 bytes, little-endian); a plain list if one does not fit."""
    if not ids:
        return ""
    try:
        a = array("I", ids)  # C-speed; refuses negatives and ids past 32 bits
    except OverflowError:
        return list(ids)
    if a.itemsize != 4:
        return list(ids)
    if sys.byteorder == "big":
        a.byteswap()
    raw = bytearray(a.tobytes())
    high = raw[3::4]
    if high.count(0) != len(high):
        return list(ids)  # an id past 24 bits
    del raw[3::4]  # drop each id's high byte (zero below 2**24)
    return base64.b64encode(raw).decode("ascii")


def unpack(value: str | list[int]) -> list[int]:
    """The ids `pack` wrote."""
    if isinstance(value, list):
        return value
    raw = base64.b64decode(value)
    if len(raw) % 3:
        raise ValueError("packed token ids: length is not a multiple of 3 bytes")
    wide = bytearray(len(raw) // 3 * 4)
    for k in range(3):
        wide[k::4] = raw[k::3]
    a = array("I")
    if a.itemsize != 4:
        return [int.from_bytes(wide[i : i + 4], "little") for i in range(0, len(wide), 4)]
    a.frombytes(bytes(wide))
    if sys.byteorder == "big":
        a.byteswap()
    return a.tolist()


def _shared_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n  # the usual case, compared at C speed
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


@dataclass
class TurnIdsLog:
    """The ids of one sample's regenerated turns, in order; what goes into its result record."""

    turns: list[TurnIds | None] = field(default_factory=list)
    why: list[str | None] = field(default_factory=list)  # per turn: None with ids, else a MISSING code

    def add(self, ids: TurnIds | None, why: str | None = None) -> None:
        """One turn's ids, or None and why not (NONE_RETURNED unless said)."""
        self.turns.append(ids)
        self.why.append(None if ids is not None else (why or NONE_RETURNED))

    def missing(self) -> dict[str, int]:
        """Turns without ids, by MISSING code."""
        out: dict[str, int] = {}
        for w in self.why:
            if w is not None:
                out[w] = out.get(w, 0) + 1
        return out

    @property
    def with_ids(self) -> int:
        return sum(t is not None for t in self.turns)

    @property
    def without_ids(self) -> int:
        return sum(t is None for t in self.turns)

    def record(self) -> dict[str, Any]:
        """The result record's `token_ids` field (see the module docstring)."""
        out: list[dict[str, Any] | None] = []
        previous: list[int] = []
        for t in self.turns:
            if t is None:
                out.append(None)
                previous = []
                continue
            reuse = _shared_prefix(previous, t.prompt)
            out.append({"prompt": pack(t.prompt[reuse:]), "reuse": reuse, "completion": pack(t.completion)})
            previous = t.prompt + t.completion
        if any(w is not None for w in self.why):
            return {"encoding": ENCODING, "turns": out, "why": list(self.why)}
        return {"encoding": ENCODING, "turns": out}  # every turn has ids: the record as before `why`


def recorded_turns(rec: dict[str, Any]) -> list[TurnIds | None] | None:
    """The ids of a result record's regenerated turns (None per turn without); None if the record has none at all."""
    field_ = rec.get("token_ids")
    if not isinstance(field_, dict) or field_.get("encoding") != ENCODING:
        return None
    turns: list[TurnIds | None] = []
    previous: list[int] = []
    for t in field_.get("turns") or []:
        if t is None:
            turns.append(None)
            previous = []
            continue
        reuse = int(t.get("reuse") or 0)
        if reuse > len(previous):
            raise ValueError("token_ids: a turn reuses more ids than the previous turn has")
        prompt = previous[:reuse] + unpack(t["prompt"])
        completion = unpack(t["completion"])
        turns.append(TurnIds(prompt, completion))
        previous = prompt + completion
    return turns


def missing_turns(rec: dict[str, Any]) -> list[tuple[int, str | None]]:
    """(turn index, MISSING code) of each of a record's turns without ids; None as code where the record says no why."""
    field_ = rec.get("token_ids")
    if not isinstance(field_, dict):
        return []
    why = field_.get("why")
    why = why if isinstance(why, list) else []
    return [
        (k, why[k] if k < len(why) and isinstance(why[k], str) else None)
        for k, t in enumerate(field_.get("turns") or [])
        if t is None
    ]
