"""What a mix did, as types: per-source counts, per-domain quota outcomes, notes; JSON for the report."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fleetgen.mix.quotas import Allocation

MAX_EXAMPLES = 5


@dataclass
class SourceStats:
    """Counts for one source, stage by stage; every row read ends in exactly one bucket."""

    name: str
    adapter: str
    path: str
    rows_read: int = 0
    skipped: Counter = field(default_factory=Counter)
    skipped_examples: list[str] = field(default_factory=list)
    filtered: Counter = field(default_factory=Counter)
    capped: int = 0
    exact_duplicates: int = 0
    near_duplicates: int = 0
    candidates: int = 0
    selected: int = 0
    selected_tokens: int = 0
    licenses: Counter = field(default_factory=Counter)
    licenses_selected: Counter = field(default_factory=Counter)
    domains_before: Counter = field(default_factory=Counter)
    domains_after: Counter = field(default_factory=Counter)

    def skip(self, pos: int, reason: str, detail: str = "") -> None:
        self.skipped[reason] += 1
        if len(self.skipped_examples) < MAX_EXAMPLES:
            self.skipped_examples.append(f"row {pos}: {reason}" + (f" ({detail[:120]})" if detail else ""))

    @property
    def normalized(self) -> int:
        return self.rows_read - sum(self.skipped.values())


@dataclass
class MixSummary:
    """The outcome of `build_mix`: where the prompts went and how the quotas came out."""

    output: Path
    rows_written: int
    tokens_written: int
    quota_unit: str
    total_requested: int
    seed: int
    domains: list[Allocation]
    domains_selected: dict[str, int]
    sources: list[SourceStats]
    notes: list[str] = field(default_factory=list)
    cross_source_duplicates: int = 0
    report_dir: Path | None = None
    elapsed_s: float = 0.0

    @property
    def rows_skipped(self) -> int:
        return sum(sum(s.skipped.values()) for s in self.sources)

    def to_dict(self) -> dict[str, Any]:
        sources = []
        for s in self.sources:
            d = {k: (dict(v) if isinstance(v, Counter) else v) for k, v in vars(s).items()}
            sources.append(d)
        return {
            "output": str(self.output),
            "rows_written": self.rows_written,
            "tokens_written": self.tokens_written,
            "quota_unit": self.quota_unit,
            "total_requested": self.total_requested,
            "seed": self.seed,
            "domains": [asdict(a) for a in self.domains],
            "domains_selected": self.domains_selected,
            "sources": sources,
            "rows_skipped": self.rows_skipped,
            "notes": self.notes,
            "cross_source_duplicates": self.cross_source_duplicates,
            "report_dir": str(self.report_dir) if self.report_dir else None,
            "elapsed_s": self.elapsed_s,
        }
