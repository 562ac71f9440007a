"""NousResearch/hermes-function-calling-v1: `id`, `conversations` [{from, value}], `category`, `subcategory`, `task`.

Quirks: the system turn holds the tool schemas as a Python repr (single quotes, True/None)
inside `<tools>...</tools>`, plus instructions for Hermes' own `<tool_call>` format. The
schemas become OpenAI `tools` (real JSON); the tools block and the format instructions are
removed from the system turn, because the target's chat template renders tools its own way.
Assistant `<tool_call>` turns inside a multi-turn conversation become OpenAI `tool_calls`, and
`<tool_response>` turns become tool turns. Some rows put the roles out of order (system after
the user, assistant first); `normalize_turns` fixes and records that.
License: apache-2.0 on the dataset card.
"""

from __future__ import annotations

import json
import re
from typing import Any

from fleetgen.mix.adapters._chat import as_tool, literal, normalize_turns, sharegpt_turns
from fleetgen.mix.adapters.base import Adapter, Converted
from fleetgen.rows.prompt import RecordError

_TOOLS = re.compile(r"<tools>(.*?)</tools>", re.S)
_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)
_TOOL_RESPONSE = re.compile(r"<tool_response>(.*?)</tool_response>", re.S)
# Hermes' instructions about its own call format, from this sentence to the end of the turn.
_FORMAT_TAIL = re.compile(r"(Use the following pydantic model json schema|For each function call return).*", re.S)
_PROVIDED = re.compile(r"You are provided with function signatures within <tools>\s*</tools> XML tags\.?\s*")


def _split_objects(text: str) -> list[str]:
    """Top-level {...} objects of a text that lists several without brackets or commas."""
    out, depth, start, quote = [], 0, None, None
    for i, ch in enumerate(text):
        if quote:
            if ch == quote and text[i - 1] != "\\":
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0 and start is not None:
                out.append(text[start : i + 1])
    return out


def parse_tools(system: str) -> list[dict[str, Any]] | None:
    """OpenAI tools from the `<tools>` block of a Hermes system turn; None when there is none."""
    bodies = [m.group(1).strip() for m in _TOOLS.finditer(_PROVIDED.sub("", system))]
    bodies = [b for b in bodies if b]
    if not bodies:
        return None
    body = "\n".join(bodies)
    try:
        value = literal(body)
        items = value if isinstance(value, list) else [value]
    except RecordError:
        pieces = _split_objects(body)
        if not pieces:
            raise
        items = [literal(p) for p in pieces]
    return [as_tool(x) for x in items]


def clean_system(system: str) -> str:
    """The system turn without the tools block and Hermes' call-format instructions."""
    s = _PROVIDED.sub("", system)
    s = _TOOLS.sub("", s)
    s = _FORMAT_TAIL.sub("", s)
    return re.sub(r"\n{3,}", "\n\n", s).strip()


def _tool_calls(content: str, counter: list[int]) -> tuple[str, list[dict[str, Any]]]:
    calls = []
    for body in _TOOL_CALL.findall(content):
        call = literal(body)
        if not isinstance(call, dict) or "name" not in call:
            raise RecordError("unparsable tool call", body[:80])
        counter[0] += 1
        calls.append(
            {
                "id": f"call_{counter[0]}",
                "type": "function",
                "function": {
                    "name": call["name"],
                    "arguments": json.dumps(call.get("arguments", {}), ensure_ascii=False),
                },
            }
        )
    return _TOOL_CALL.sub("", content).strip(), calls


class HermesFunctionCalling(Adapter):
    name = "hermes_function_calling"
    description = "NousResearch/hermes-function-calling-v1: tool schemas in the system turn"
    required_columns = ("conversations",)
    license = "apache-2.0"

    def convert(self, row: dict[str, Any]) -> Converted:
        turns = sharegpt_turns(row["conversations"])
        tools: list[dict[str, Any]] | None = None
        counter = [0]
        pending: list[str] = []
        for t in turns:
            if t["role"] == "system":
                found = parse_tools(t["content"])
                if found:
                    tools = (tools or []) + found
                t["content"] = clean_system(t["content"])
            elif t["role"] == "assistant" and "<tool_call>" in t["content"]:
                t["content"], calls = _tool_calls(t["content"], counter)
                if calls:
                    t["tool_calls"] = calls
                    pending = [c["id"] for c in calls]
            elif t["role"] == "tool":
                m = _TOOL_RESPONSE.search(t["content"])
                if m:
                    t["content"] = m.group(1).strip()
                if pending:
                    t["tool_call_id"] = pending.pop(0)
        messages, meta = normalize_turns(turns)
        extra = {k: row.get(k) for k in ("category", "subcategory", "task") if row.get(k) is not None}
        extra.update(meta)
        rid = row.get("id")
        return Converted(
            messages,
            tools=tools,
            original_id=None if rid is None else str(rid),
            source_domain=("tool_use", "label:dataset") if tools else None,
            extra=extra,
        )
