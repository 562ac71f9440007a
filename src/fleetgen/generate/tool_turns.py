"""Tool turns that stay coherent: a recorded tool result follows only a regenerated call it answers.

After the target regenerates an assistant turn, the recorded tool results that followed the
recorded turn are checked against the calls the target actually made:

- each regenerated call must match a recorded call (the same function and, under the default
  `tool_match: arguments`, JSON-equal arguments; under `name`, the function alone) that has a
  recorded result; the matched call takes the recorded call's id, so its result stays attached;
- a recorded result whose call the target did not make is dropped (counted, never kept);
- where a regenerated call has no recorded result, or the target answered where the record
  called (or called where the record answered), the sample ends at the target's own turn: that
  turn is kept and supervised, the rest of the recorded conversation is not, and the row says
  where and why (`cut`). A turn with nothing recorded after it is never a cut: nothing is lost.

Matching is greedy over an equivalence (same name, equal arguments), which for equality is a
maximum matching: parallel calls in any order match their recorded twins.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

ToolMatch = Literal["arguments", "name"]

CutReason = Literal[
    "answered_without_call",  # the record called a tool here; the target answered instead
    "other_function",  # the target called a function the record did not call here
    "other_arguments",  # the same function, with arguments the recorded result does not answer
    "no_recorded_result",  # the target's call matches a recorded call that has no recorded result
    "unrecorded_call",  # the record answered here; the target called a tool, and the record goes on
]

CUT_REASONS: tuple[str, ...] = CutReason.__args__  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Cut:
    """Why a sample ends at the target's turn instead of where the recorded conversation ends."""

    reason: CutReason
    detail: str


@dataclass
class FollowUp:
    """What follows a regenerated turn: its calls (ids re-attached), the results kept, or a cut."""

    calls: list[dict[str, Any]] | None
    results: list[dict[str, Any]] = field(default_factory=list)
    dropped: list[dict[str, Any]] = field(default_factory=list)
    cut: Cut | None = None


def call_name(call: dict[str, Any]) -> str | None:
    """The function a call names: OpenAI `function.name`, or a flat `name`."""
    fn = call.get("function")
    if isinstance(fn, dict) and fn.get("name") is not None:
        return str(fn["name"])
    return str(call["name"]) if call.get("name") is not None else None


def call_arguments(call: dict[str, Any]) -> Any:
    """A call's arguments as data: a JSON string is parsed (so spacing and key order do not matter)."""
    fn = call.get("function")
    raw = fn.get("arguments") if isinstance(fn, dict) else call.get("arguments")
    if isinstance(raw, str):
        try:
            return orjson.loads(raw) if raw.strip() else {}
        except orjson.JSONDecodeError:
            return raw  # not JSON: compared as the text it is
    return {} if raw is None else raw


def _describe(call: dict[str, Any]) -> str:
    args = call_arguments(call)
    text = args if isinstance(args, str) else orjson.dumps(args, option=orjson.OPT_SORT_KEYS).decode()
    return f"{call_name(call)}({text[:120]})"


def answered_call(results: list[dict[str, Any]], recorded: list[dict[str, Any]]) -> list[int | None]:
    """For each recorded tool result, the index of the recorded call it answers: by id, else by position.

    Position stands in only where ids cannot say (the result has no tool_call_id, or the calls have no
    ids); a result naming an id no recorded call has answers nothing.
    """
    ids = {c.get("id"): i for i, c in enumerate(recorded) if isinstance(c, dict) and c.get("id")}
    out: list[int | None] = []
    for pos, r in enumerate(results):
        tid = r.get("tool_call_id")
        if tid and tid in ids:
            out.append(ids[tid])
        elif (not tid or not ids) and pos < len(recorded):
            out.append(pos)
        else:
            out.append(None)
    return out


def follow_up(
    recorded_turn: dict[str, Any] | None,
    recorded_results: list[dict[str, Any]],
    calls: list[dict[str, Any]] | None,
    *,
    match: ToolMatch,
    more_follows: bool,
) -> FollowUp:
    """Check a regenerated turn's `calls` against the recorded turn and the tool results after it.

    `more_follows`: the recorded conversation goes on after those results (so a call without a
    result, or an answer where the record called, would end the sample early: a cut).
    """
    recorded = [c for c in ((recorded_turn or {}).get("tool_calls") or []) if isinstance(c, dict)]
    made = [dict(c) for c in calls or []]
    goes_on = more_follows or bool(recorded_results)
    answers = answered_call(recorded_results, recorded)
    has_result = {i for i in answers if i is not None}

    if not made:
        if not recorded_results:
            return FollowUp(None)  # nothing recorded to answer: the conversation simply goes on
        cut = Cut("answered_without_call", f"the record called {', '.join(_describe(c) for c in recorded) or 'a tool'}; "
                  "the target answered without calling")
        return FollowUp(None, dropped=list(recorded_results), cut=cut)

    used: set[int] = set()
    cut: Cut | None = None
    for c in made:
        name, args = call_name(c), call_arguments(c)
        j = next(
            (i for i, r in enumerate(recorded)
             if i not in used and call_name(r) == name and (match == "name" or call_arguments(r) == args)),
            None,
        )
        if j is None:
            if not recorded:
                cut = Cut("unrecorded_call", f"the record answered here; the target called {_describe(c)}")
            elif any(call_name(r) == name for r in recorded):
                cut = Cut("other_arguments", f"the target called {_describe(c)}; the record called "
                          + ", ".join(_describe(r) for r in recorded if call_name(r) == name))
            else:
                cut = Cut("other_function", f"the target called {_describe(c)}; the record called "
                          + ", ".join(_describe(r) for r in recorded))
            break
        if j not in has_result:
            cut = Cut("no_recorded_result", f"the target called {_describe(c)}, which the record called but holds no result for")
            break
        used.add(j)
        if recorded[j].get("id"):
            c["id"] = recorded[j]["id"]
    if cut is not None:
        if not goes_on:
            return FollowUp(made)  # the record ends here too: the row ends on the target's call, nothing lost
        return FollowUp(made, dropped=list(recorded_results), cut=cut)
    kept = [dict(r) for r, i in zip(recorded_results, answers) if i in used]
    dropped = [dict(r) for r, i in zip(recorded_results, answers) if i not in used]
    return FollowUp(made, results=kept, dropped=dropped)
