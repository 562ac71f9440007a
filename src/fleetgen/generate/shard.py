"""`--shard i/N`: which prompt rows one of N client processes owns, and the journal files it writes; `replica_slice`.

A row belongs to shard id_hash(id) mod N: the 128-bit hash the done set uses, so the split is the
same on every machine and every run, and all rows of one id (its samples, its duplicates) land in
one shard. A row whose id cannot be read (a bad row) is owned by its line number mod N. Each shard
writes its own journal files in the shared output directory (results.shard-i-of-N.jsonl and so on);
`export` and `report` read every results*.jsonl and errors*.jsonl there as one output. The same
i/N form slices a fleet's replicas by position (`replica_slice`), so each shard can drive its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TypeVar

from fleetgen.errors import ConfigError
from fleetgen.generate.doneset import id_hash

_SPEC = re.compile(r"^(\d+)/(\d+)$")
# The error files of an output directory: errors.jsonl and one per shard (not the archived retried ones).
ERROR_FILES = re.compile(r"^errors(\.shard-\d+-of-\d+)?\.jsonl$")
STATS_FILES = re.compile(r"^stats(\.shard-\d+-of-\d+)?\.json$")
T = TypeVar("T")


@dataclass(frozen=True)
class Shard:
    """Shard `index` of `count` (0-based)."""

    index: int = 0
    count: int = 1

    @classmethod
    def parse(cls, spec: str | None) -> Shard:
        """'i/N' (0 <= i < N) into a Shard; None is the whole job."""
        if spec is None:
            return cls()
        m = _SPEC.match(spec.strip())
        if not m or not int(m.group(2)) >= 1 or not int(m.group(1)) < int(m.group(2)):
            raise ConfigError(f"--shard {spec!r} is not i/N with 0 <= i < N", hint="e.g. --shard 0/4 ... --shard 3/4")
        return cls(int(m.group(1)), int(m.group(2)))

    @property
    def whole(self) -> bool:
        return self.count == 1

    @property
    def suffix(self) -> str:
        """What the shard's journal file names carry before their extension ('' for the whole job)."""
        return "" if self.whole else f".shard-{self.index}-of-{self.count}"

    def owns(self, rid: str) -> bool:
        return self.whole or id_hash(rid) % self.count == self.index

    def owns_line(self, line: int) -> bool:
        return self.whole or line % self.count == self.index

    def owns_replica(self, position: int) -> bool:
        """For `replica_slice`: the replica at this position of the fleet state (or --endpoint list) is this slice's."""
        return self.whole or position % self.count == self.index

    def of(self, items: list[T]) -> list[T]:
        """The items at the positions this slice owns."""
        return [x for k, x in enumerate(items) if self.owns_replica(k)]


def merge_stats(parts: list[dict]) -> dict:
    """The stats.json of N shards as one run's: counters summed, rates added, wall the longest, replicas listed per shard."""
    out: dict = {"rows": {}, "tokens": {}, "wall_s": 0.0, "output_tokens_per_s": 0.0, "interrupted": False,
                 "stopped_reason": None, "replicas": [], "shards": len(parts)}
    for part in parts:
        for group in ("rows", "tokens"):
            for key, value in (part.get(group) or {}).items():
                if isinstance(value, (int, float)):
                    out[group][key] = out[group].get(key, 0) + value
        out["wall_s"] = max(out["wall_s"], part.get("wall_s") or 0.0)
        out["output_tokens_per_s"] += part.get("output_tokens_per_s") or 0.0
        out["interrupted"] = out["interrupted"] or bool(part.get("interrupted"))
        out["stopped_reason"] = out["stopped_reason"] or part.get("stopped_reason")
        out["replicas"] += part.get("replicas") or []
        ids = part.get("token_ids") or {}
        mine = out.setdefault("token_ids", {"turns_with": 0, "turns_without": 0, "without_by_reason": {}})
        for key in ("turns_with", "turns_without"):
            mine[key] += int(ids.get(key) or 0)
        for why, n in (ids.get("without_by_reason") or {}).items():
            mine["without_by_reason"][why] = mine["without_by_reason"].get(why, 0) + int(n or 0)
        out.setdefault("notes", []).extend(n for n in part.get("notes") or [] if n not in out["notes"])
    if parts and "total" in out["rows"]:
        out["rows"]["total"] = parts[0]["rows"]["total"]  # each shard counts the whole prompt file
    return out
