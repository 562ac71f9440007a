"""Generic ShareGPT: `conversations` [{from, value, loss?}], optional `system`, `tools`, `id`.

Agent-trajectory sets (e.g. AgentInstruct style) carry a per-turn `loss` flag: false on the
scaffolding turns (the task statement's "OK" acknowledgements), true on the turns to train on.
The flags are kept aligned with the output messages in meta.loss so `export` can mask the
same turns; observations may come as `observation`/`function`/`tool` turns (role tool).
"""

from __future__ import annotations

from typing import Any

from fleetgen.mix.adapters._chat import coerce_tools, normalize_turns, sharegpt_turns
from fleetgen.mix.adapters.base import Adapter, Converted
from fleetgen.rows.prompt import text_of


class ShareGPT(Adapter):
    name = "sharegpt"
    description = "generic ShareGPT rows: conversations [{from, value}]"
    required_columns = ("conversations",)

    def convert(self, row: dict[str, Any]) -> Converted:
        turns = sharegpt_turns(row["conversations"])
        system = text_of(row.get("system")).strip()
        if system:
            turns.insert(0, {"role": "system", "content": system})
        messages, meta = normalize_turns(turns)
        rid = row.get("id")
        return Converted(
            messages, tools=coerce_tools(row.get("tools")), original_id=None if rid is None else str(rid), extra=meta
        )
