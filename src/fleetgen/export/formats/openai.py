"""OpenAI chat JSONL: {"id", "messages": [...], "tools"?}, the shape chat fine-tuning tools read."""

from __future__ import annotations

from typing import Any

from fleetgen.export.formats.base import Format, Row, clean_message
from fleetgen.export.results import row_id


class OpenAIFormat(Format):
    name = "openai"

    def convert(self, rec: dict[str, Any]) -> list[Row]:
        row: Row = {
            "id": row_id(rec),
            "messages": [clean_message(m, self.config.reasoning) for m in rec["messages"]],
        }
        if rec.get("tools"):
            row["tools"] = rec["tools"]
        return [row]
