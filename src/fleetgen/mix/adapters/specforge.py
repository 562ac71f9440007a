"""SpecForge conversation rows: `conversations` [{role, content}], optional `id`, `tools`."""

from __future__ import annotations

from typing import Any

from fleetgen.mix.adapters._chat import coerce_tools, normalize_turns
from fleetgen.mix.adapters.base import Adapter, Converted
from fleetgen.mix.adapters.openai_messages import openai_turns
from fleetgen.rows.prompt import RecordError


class SpecForge(Adapter):
    name = "specforge"
    description = "SpecForge rows: conversations [{role, content}]"
    required_columns = ("conversations",)

    def convert(self, row: dict[str, Any]) -> Converted:
        if not isinstance(row["conversations"], list):
            raise RecordError("conversations is not a list")
        messages, meta = normalize_turns(openai_turns(row["conversations"]))
        rid = row.get("id")
        return Converted(
            messages, tools=coerce_tools(row.get("tools")), original_id=None if rid is None else str(rid), extra=meta
        )
