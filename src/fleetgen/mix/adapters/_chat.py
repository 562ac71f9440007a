"""Shared conversation normalization: ShareGPT roles, text content, role order, trailing answers."""

from __future__ import annotations

import ast
import json
from typing import Any

from fleetgen.rows.prompt import SHAREGPT_ROLES, RecordError, text_of


def sharegpt_turns(conversations: Any, *, key_from: str = "from", key_value: str = "value") -> list[dict[str, Any]]:
    """ShareGPT `[{from, value, loss?}]` -> turns `{role, content, _loss?}`."""
    if not isinstance(conversations, list) or not conversations:
        raise RecordError("empty conversation")
    turns = []
    for t in conversations:
        if not isinstance(t, dict):
            raise RecordError("turn is not an object")
        speaker = str(t.get(key_from, "")).strip().lower()
        role = SHAREGPT_ROLES.get(speaker)
        if role is None:
            raise RecordError("unknown speaker", speaker[:40])
        turn: dict[str, Any] = {"role": role, "content": text_of(t.get(key_value))}
        if "loss" in t:
            turn["_loss"] = _as_flag(t["loss"])
        turns.append(turn)
    return turns


def _as_flag(v: Any) -> bool | None:
    if v is None or isinstance(v, bool):
        return v
    if isinstance(v, (int, float)):
        return bool(v)
    s = str(v).strip().lower()
    return True if s in ("true", "1", "yes") else False if s in ("false", "0", "no") else None


def normalize_turns(turns: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Fix role order and drop the answers to regenerate; returns (messages, meta additions).

    Fixes, each recorded in meta.fixes: system turns anywhere go first (merged); assistant
    turns before the first user turn are dropped; consecutive user turns are merged; empty user
    turns are dropped. Trailing assistant turns are removed (meta.answers_removed).
    """
    fixes: list[str] = []
    systems = [t for t in turns if t["role"] == "system"]
    rest = [t for t in turns if t["role"] != "system"]
    if systems and turns[0]["role"] != "system" or len(systems) > 1:
        fixes.append("system turn moved first")
    out: list[dict[str, Any]] = []
    sys_text = "\n\n".join(t["content"] for t in systems if t["content"].strip())
    if sys_text:
        out.append({"role": "system", "content": sys_text})
    seen_user = False
    for t in rest:
        if t["role"] == "user" and not t["content"].strip():
            fixes.append("empty user turn dropped")
            continue
        if not seen_user and t["role"] != "user":
            fixes.append(f"{t['role']} turn before the first user turn dropped")
            continue
        if t["role"] == "user":
            seen_user = True
            if out and out[-1]["role"] == "user":
                out[-1] = {**out[-1], "content": out[-1]["content"] + "\n\n" + t["content"]}
                fixes.append("consecutive user turns merged")
                continue
        out.append(t)
    removed = 0
    while out and out[-1]["role"] == "assistant":
        out.pop()
        removed += 1
    if not seen_user:
        raise RecordError("no user turn")
    meta: dict[str, Any] = {"answers_removed": removed}
    if any("_loss" in t for t in out):
        meta["loss"] = [t.get("_loss") for t in out]
    for t in out:
        t.pop("_loss", None)
    if fixes:
        meta["fixes"] = sorted(set(fixes))
    return out, meta


def literal(text: str) -> Any:
    """JSON first, then a Python literal (the dataset's repr form); round-trip to plain JSON types."""
    text = text.strip()
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        raise RecordError("unparsable tool schema", text[:80]) from None
    return json.loads(json.dumps(value))


def as_tool(obj: Any) -> dict[str, Any]:
    if isinstance(obj, dict) and obj.get("type") == "function" and isinstance(obj.get("function"), dict):
        tool = obj
    elif isinstance(obj, dict) and isinstance(obj.get("name"), str):
        tool = {"type": "function", "function": obj}
    else:
        raise RecordError("tool schema without a name", str(obj)[:80])
    if not isinstance(tool["function"].get("name"), str):
        raise RecordError("tool schema without a name", str(obj)[:80])
    return tool


def coerce_tools(value: Any) -> list[dict[str, Any]] | None:
    """A row's `tools` field (a list, or JSON / Python-repr text of one) as OpenAI tools."""
    if value is None or value == "" or value == []:
        return None
    if isinstance(value, str):
        value = literal(value)
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list):
        raise RecordError("tools is not a list", type(value).__name__)
    return [as_tool(t) for t in value] or None
