"""Alpaca rows: `instruction`, optional `input` (appended after a blank line), `output` (dropped), `system`."""

from __future__ import annotations

from typing import Any

from fleetgen.mix.adapters.base import Adapter, Converted
from fleetgen.rows.prompt import RecordError, text_of


class Alpaca(Adapter):
    name = "alpaca"
    description = "Alpaca rows: instruction / input / output"
    required_columns = ("instruction",)

    def convert(self, row: dict[str, Any]) -> Converted:
        instruction = text_of(row["instruction"]).strip()
        extra_input = text_of(row.get("input")).strip()
        prompt = f"{instruction}\n\n{extra_input}" if instruction and extra_input else instruction or extra_input
        if not prompt:
            raise RecordError("empty instruction")
        messages = [{"role": "user", "content": prompt}]
        system = text_of(row.get("system")).strip()
        if system:
            messages.insert(0, {"role": "system", "content": system})
        rid = row.get("id")
        return Converted(messages, original_id=None if rid is None else str(rid))
