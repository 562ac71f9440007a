"""Tool turns that stay coherent: a recorded tool result follows only a regenerated call it answers.

After the target regenerates an assistant turn, the recorded tool results that followed the
recorded turn are checked against the calls the target actually made:

- each regenerated call must match a recorded call (the same function and, under the default
  `tool_match: arguments`, equal arguments as JSON values with their types: `true` is not `1`;
  under `name`, the function alone) that has a recorded result; the matched call takes the
  recorded call's id, so its result stays attached;
- the kept results follow the order of the target's calls, each with `tool_call_id` set to the
  call it answers: templates that pair the k-th result with the k-th call by position (Hermes,
  Qwen2.5/Qwen3 `<tool_response>` blocks) then show each call its own result;
- a recorded result whose call the target did not make is dropped (counted, never kept);
- where a regenerated call has no recorded result, or the target answered where the record
  called (or called where the record answered), the sample ends at the target's own turn: that
  turn is kept and supervised, the rest of the recorded conversation is not, and the row says
  where and why (`cut`). A turn with nothing recorded after it is never a cut: nothing is lost.

Matching is greedy over an equivalence (same name, equal arguments), which for equality is a
maximum matching: parallel calls in any order match their recorded twins. Among equal recorded
calls a twin with a result is taken first; under `name`, argument-equal twins are taken before
other calls of the same function.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from fleetgen.generate.config.sampling import ToolMatch

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


def _typed(value: Any) -> Any:
    """A JSON value as a hashable form that keeps its JSON type: `true` is not `1`, `1` is `1.0`, key order is free."""
    if value is None:
        return ("null",)
    if isinstance(value, bool):  # before int: bool is an int in Python
        return ("bool", value)
    if isinstance(value, int | float):
        return ("number", value)
    if isinstance(value, str):
        return ("string", value)
    if isinstance(value, list | tuple):
        return ("array", tuple(_typed(v) for v in value))
    if isinstance(value, dict):
        return ("object", frozenset((str(k), _typed(v)) for k, v in value.items()))
    return ("other", repr(value))


def same_arguments(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Two calls' arguments are equal JSON values, types included; a non-JSON string compares as its text."""
    return _typed_arguments(a) == _typed_arguments(b)


def _typed_arguments(call: dict[str, Any]) -> Any:
    fn = call.get("function")
    raw = fn.get("arguments") if isinstance(fn, dict) else call.get("arguments")
    if isinstance(raw, str):
        try:
            return _typed(orjson.loads(raw) if raw.strip() else {})
        except orjson.JSONDecodeError:
            return ("text", raw)  # not JSON: never equal to a JSON value
    return _typed({} if raw is None else raw)


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
        cut = Cut(
            "answered_without_call",
            f"the record called {', '.join(_describe(c) for c in recorded) or 'a tool'}; "
            "the target answered without calling",
        )
        return FollowUp(None, dropped=list(recorded_results), cut=cut)

    twin = _match(made, recorded, has_result, match)
    cut: Cut | None = None
    for k, c in enumerate(made):
        j = twin[k]
        if j is not None and j in has_result:
            continue
        name = call_name(c)
        if j is not None:
            cut = Cut(
                "no_recorded_result",
                f"the target called {_describe(c)}, which the record called but holds no result for",
            )
        elif not recorded:
            cut = Cut("unrecorded_call", f"the record answered here; the target called {_describe(c)}")
        elif any(call_name(r) == name for r in recorded):
            cut = Cut(
                "other_arguments",
                f"the target called {_describe(c)}; the record called "
                + ", ".join(_describe(r) for r in recorded if call_name(r) == name),
            )
        else:
            cut = Cut(
                "other_function",
                f"the target called {_describe(c)}; the record called " + ", ".join(_describe(r) for r in recorded),
            )
        break
    if cut is not None:
        if not goes_on:
            return FollowUp(made)  # the record ends here too: the row ends on the target's call, nothing lost
        return FollowUp(made, dropped=list(recorded_results), cut=cut)
    # Each call takes its twin's id; its result follows in the target's order, naming that call.
    first_answer: dict[int, int] = {}
    for pos, i in enumerate(answers):
        if i is not None:
            first_answer.setdefault(i, pos)
    kept: list[dict[str, Any]] = []
    for c, j in zip(made, twin):
        assert j is not None
        if recorded[j].get("id"):
            c["id"] = recorded[j]["id"]
        r = dict(recorded_results[first_answer[j]])
        if c.get("id"):
            r["tool_call_id"] = c["id"]
        else:
            r.pop("tool_call_id", None)
        kept.append(r)
    used = {first_answer[j] for j in twin if j is not None}
    dropped = [dict(r) for pos, r in enumerate(recorded_results) if pos not in used]
    return FollowUp(made, results=kept, dropped=dropped)


def _match(
    made: list[dict[str, Any]], recorded: list[dict[str, Any]], has_result: set[int], match: ToolMatch
) -> list[int | None]:
    """For each call made, the recorded call it matches (None: none left), twins with a result taken first.

    Passes from the strictest to the loosest, so a looser pass never takes a twin a stricter one needs:
    equal arguments with a result; under `name`, the same function with a result; then (only to name
    the cut) equal calls without a result.
    """
    out: list[int | None] = [None] * len(made)
    used: set[int] = set()
    passes: list[tuple[bool, bool]] = [(True, True)]  # (arguments must be equal, a result is needed)
    if match == "name":
        passes.append((False, True))
    passes += [(True, False)] + ([(False, False)] if match == "name" else [])
    for strict, needs_result in passes:
        for k, c in enumerate(made):
            if out[k] is not None:
                continue
            name = call_name(c)
            j = next(
                (
                    i
                    for i, r in enumerate(recorded)
                    if i not in used
                    and (not needs_result or i in has_result)
                    and call_name(r) == name
                    and (not strict or same_arguments(r, c))
                ),
                None,
            )
            if j is not None:
                out[k] = j
                used.add(j)
    return out
