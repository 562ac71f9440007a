"""ShareGPT JSONL: {"id", "conversations": [{"from", "value"}], "tools"?}.

Speakers: system, human, gpt; tool calls and results follow the LLaMA-Factory convention
(`function_call` with {"name", "arguments"} JSON, `observation`), and `tools` is a JSON string.
ShareGPT has no reasoning field: reasoning_content is not carried (use specforge or openai for it).
"""

from __future__ import annotations

import json
from typing import Any

from fleetgen.export.formats.base import Format, Row, RowRejected
from fleetgen.export.results import row_id

SPEAKER = {"system": "system", "user": "human", "assistant": "gpt", "tool": "observation"}


class ShareGPTFormat(Format):
    name = "sharegpt"

    def convert(self, rec: dict[str, Any]) -> list[Row]:
        turns: list[dict[str, str]] = []
        for m in rec["messages"]:
            role = m.get("role")
            if role not in SPEAKER:
                raise RowRejected(f"role {role!r} has no ShareGPT speaker")
            if role == "assistant" and m.get("tool_calls"):
                if m.get("content"):
                    turns.append({"from": "gpt", "value": m["content"]})
                for call in m["tool_calls"]:
                    fn = call.get("function") or {}
                    args = fn.get("arguments")
                    if isinstance(args, str):
                        try:
                            args = json.loads(args)
                        except json.JSONDecodeError:
                            raise RowRejected("tool call arguments are not JSON") from None
                    turns.append(
                        {"from": "function_call", "value": json.dumps({"name": fn.get("name"), "arguments": args})}
                    )
                continue
            turns.append({"from": SPEAKER[role], "value": m.get("content") or ""})
        row: Row = {"id": row_id(rec), "conversations": turns}
        if rec.get("tools"):
            row["tools"] = json.dumps(rec["tools"])
        return [row]
