"""What an export did: rows read, written per split, dropped and failed with their reasons."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class ExportSummary:
    """Every record read ends in exactly one of: written (train/eval), filtered, failed."""

    format: str
    outputs: dict[str, Path] = field(default_factory=dict)
    read: int = 0
    written: Counter = field(default_factory=Counter)
    filtered: Counter = field(default_factory=Counter)
    failed: Counter = field(default_factory=Counter)
    failed_examples: list[str] = field(default_factory=list)
    corrupt_lines: int = 0
    duplicates: int = 0
    supervised_tokens: int = 0
    total_tokens: int = 0

    @property
    def rows_written(self) -> int:
        return sum(self.written.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "outputs": {k: str(v) for k, v in self.outputs.items()},
            "read": self.read,
            "written": dict(self.written),
            "filtered": dict(self.filtered),
            "failed": dict(self.failed),
            "failed_examples": self.failed_examples,
            "corrupt_lines": self.corrupt_lines,
            "duplicates": self.duplicates,
            "supervised_tokens": self.supervised_tokens,
            "total_tokens": self.total_tokens,
        }
