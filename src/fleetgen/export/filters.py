"""Which result records become training rows: finished turns only, no leftover think markers, enough tokens."""

from __future__ import annotations

from typing import Any

from fleetgen.export.config import TOKEN_FORMATS, ExportConfig
from fleetgen.export.results import assistant_turns, finish_reasons, has_think_marker


def rejection(rec: dict[str, Any], config: ExportConfig) -> str | None:
    """Why a record is not exported (a short reason that counts group by), or None to keep it."""
    reasons = finish_reasons(rec)
    allowed = set(config.finish_reasons)
    bad = [r for r in reasons if r not in allowed]
    if bad:
        return f"finish_reason {bad[0]}"
    if rec.get("truncated") and "length" not in allowed:
        return "truncated"
    turns = assistant_turns(rec)
    if not turns:
        return "no assistant turn"
    if config.drop_think_markers:
        for m in turns:
            if has_think_marker(m.get("content")) or has_think_marker(m.get("reasoning_content")):
                return "leftover think marker"
    for m in turns:
        if not (m.get("content") or "").strip() and not m.get("tool_calls"):
            return "empty assistant turn"
    if config.format not in TOKEN_FORMATS and config.min_supervised_tokens:
        # Without a tokenizer the server's own count of generated tokens is the exact supervised length.
        completion = (rec.get("usage") or {}).get("completion_tokens") or 0
        if completion < config.min_supervised_tokens:
            return f"fewer than {config.min_supervised_tokens} supervised tokens"
    return None
