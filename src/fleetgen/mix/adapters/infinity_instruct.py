"""BAAI/Infinity-Instruct (e.g. config 0625): `conversations` [{from, value}], `label`, `langdetect`, `source`.

Quirks: `label.cate_ability_en` is a list of ability categories, the domain's source label;
`langdetect` is unreliable (kept as meta.langdetect, never used for filtering); conversations
can be multi-turn. License: cc-by-sa-4.0 on the dataset card (commercial use allowed, share-alike; the
files are gated behind an agreement not to harm human subjects).
"""

from __future__ import annotations

from typing import Any

from fleetgen.mix.adapters._chat import normalize_turns, sharegpt_turns
from fleetgen.mix.adapters.base import Adapter, Converted


class InfinityInstruct(Adapter):
    name = "infinity_instruct"
    description = "BAAI/Infinity-Instruct: ShareGPT conversations with ability labels"
    required_columns = ("conversations",)
    license = "cc-by-sa-4.0"

    def convert(self, row: dict[str, Any]) -> Converted:
        messages, meta = normalize_turns(sharegpt_turns(row["conversations"]))
        label = row.get("label") or {}
        labels: tuple[str, ...] = ()
        if isinstance(label, dict):
            labels = tuple(str(x) for x in (label.get("cate_ability_en") or ()))
        if row.get("langdetect") is not None:
            meta["langdetect"] = row["langdetect"]
        if row.get("source"):
            meta["upstream"] = row["source"]
        rid = row.get("id")
        return Converted(messages, original_id=None if rid is None else str(rid), labels=labels, extra=meta)
