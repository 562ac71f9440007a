"""What an export did: rows read, written per split, dropped and failed with their reasons."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class ExportSummary:
    """Every record read is failed, or becomes rows that each end written (train/eval) or filtered.

    A record becomes one row, except where the tokens format splits a conversation whose earlier turns
    its chat template rewrites into rows that end at successive assistant turns (`split_conversations`
    of them, `split_rows` rows in all), so read + extra_rows == rows_written + filtered + failed.
    """

    format: str
    outputs: dict[str, Path] = field(default_factory=dict)
    read: int = 0
    written: Counter = field(default_factory=Counter)
    filtered: Counter = field(default_factory=Counter)
    failed: Counter = field(default_factory=Counter)
    failed_examples: list[str] = field(default_factory=list)
    split_conversations: int = 0
    split_rows: int = 0
    corrupt_lines: int = 0
    duplicates: int = 0
    supervised_tokens: int = 0
    total_tokens: int = 0
    # tokens: records exported from the server's sampled ids, and those re-tokenized from text (by why).
    from_ids: int = 0
    retokenized: Counter = field(default_factory=Counter)

    @property
    def rows_written(self) -> int:
        return sum(self.written.values())

    @property
    def extra_rows(self) -> int:
        """Rows beyond one per record, from split conversations."""
        return self.split_rows - self.split_conversations

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "outputs": {k: str(v) for k, v in self.outputs.items()},
            "read": self.read,
            "written": dict(self.written),
            "filtered": dict(self.filtered),
            "failed": dict(self.failed),
            "failed_examples": self.failed_examples,
            "split_conversations": self.split_conversations,
            "split_rows": self.split_rows,
            "corrupt_lines": self.corrupt_lines,
            "duplicates": self.duplicates,
            "supervised_tokens": self.supervised_tokens,
            "total_tokens": self.total_tokens,
            "from_ids": self.from_ids,
            "retokenized": dict(self.retokenized),
        }
