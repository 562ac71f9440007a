"""What every export format is: a converter from one result record to its training rows (usually one)."""

from __future__ import annotations

from typing import Any

from fleetgen.export.config import ExportConfig

Row = dict[str, Any]

# The message fields chat templates and trainers read; everything else (meta, timing) stays in results.
MESSAGE_KEYS = ("role", "content", "reasoning_content", "tool_calls", "tool_call_id", "name")


class RowRejected(Exception):
    """This record cannot become a valid row of the format; `reason` is counted in the summary."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Format:
    """A converter; `convert` returns the record's rows, or raises RowRejected for the whole record."""

    name: str = ""

    def __init__(self, config: ExportConfig) -> None:
        self.config = config

    def convert(self, rec: dict[str, Any]) -> list[Row]:
        """One row per record, or several where the format must split it (tokens, for templates that rewrite turns)."""
        raise NotImplementedError

    def supervised_tokens(self, row: Row, rec: dict[str, Any]) -> int:
        """Tokens the trainer will learn from in this row (server count for text formats)."""
        return int((rec.get("usage") or {}).get("completion_tokens") or 0)


def clean_message(m: dict[str, Any], reasoning: str) -> dict[str, Any]:
    """The message with only the fields a template reads; reasoning removed when the config drops it."""
    out = {k: m[k] for k in MESSAGE_KEYS if k in m and m[k] is not None}
    if reasoning == "drop" or m.get("role") != "assistant" or not out.get("reasoning_content"):
        out.pop("reasoning_content", None)
    return out
