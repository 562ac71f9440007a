"""SpecForge's conversation JSONL: {"id", "conversations":
[{role, content, reasoning_content?, tool_calls?}], "tools"?}.

SpecForge's loader keeps `conversations` and `tools` and passes any other top-level column to the
chat template as a keyword, so a row carries nothing else (meta and timing stay in results.jsonl).
"""

from __future__ import annotations

from typing import Any

from fleetgen.export.formats.base import Format, Row, clean_message
from fleetgen.export.results import row_id

# Fields SpecForge's ThinkingParser keeps on a message (GeneralParser keeps role, content, tool_calls).
SPECFORGE_MESSAGE_KEYS = ("role", "content", "reasoning_content", "tool_calls", "tool_call_id", "name")


class SpecForgeFormat(Format):
    name = "specforge"

    def convert(self, rec: dict[str, Any]) -> list[Row]:
        convs = []
        for m in rec["messages"]:
            msg = clean_message(m, self.config.reasoning)
            convs.append({k: msg[k] for k in SPECFORGE_MESSAGE_KEYS if k in msg})
        row: Row = {"id": row_id(rec), "conversations": convs}
        if rec.get("tools"):
            row["tools"] = rec["tools"]
        return [row]
