"""OpenAI chat rows: `messages` [{role, content, tool_calls?, tool_call_id?}], optional `tools`, `id`."""

from __future__ import annotations

import json
from typing import Any

from fleetgen.mix.adapters._chat import coerce_tools, normalize_turns
from fleetgen.mix.adapters.base import Adapter, Converted
from fleetgen.rows.prompt import RecordError, text_of

_ROLES = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
    "function": "tool",
}


def _call(c: Any) -> dict[str, Any]:
    fn = c.get("function") if isinstance(c, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise RecordError("malformed tool call", str(c)[:80])
    args = fn.get("arguments", {})
    if not isinstance(args, str):
        args = json.dumps(args, ensure_ascii=False)
    out = {"type": "function", "function": {"name": fn["name"], "arguments": args}}
    if c.get("id"):
        out["id"] = str(c["id"])
    return out


def openai_turns(messages: list[Any]) -> list[dict[str, Any]]:
    """OpenAI-style messages -> turns for `normalize_turns`, keeping tool calls and tool ids."""
    if not messages:
        raise RecordError("empty conversation")
    turns = []
    for m in messages:
        if not isinstance(m, dict):
            raise RecordError("turn is not an object")
        role = _ROLES.get(str(m.get("role", "")).lower())
        if role is None:
            raise RecordError("unknown role", str(m.get("role"))[:40])
        turn: dict[str, Any] = {"role": role, "content": text_of(m.get("content"))}
        if role == "assistant" and m.get("tool_calls"):
            turn["tool_calls"] = [_call(c) for c in m["tool_calls"]]
        if role == "tool" and m.get("tool_call_id"):
            turn["tool_call_id"] = str(m["tool_call_id"])
        turns.append(turn)
    return turns


class OpenAIMessages(Adapter):
    name = "openai_messages"
    description = "OpenAI chat rows: messages [{role, content}] and tools"
    required_columns = ("messages",)

    def convert(self, row: dict[str, Any]) -> Converted:
        if not isinstance(row["messages"], list):
            raise RecordError("messages is not a list")
        messages, meta = normalize_turns(openai_turns(row["messages"]))
        rid = row.get("id")
        return Converted(
            messages, tools=coerce_tools(row.get("tools")), original_id=None if rid is None else str(rid), extra=meta
        )
