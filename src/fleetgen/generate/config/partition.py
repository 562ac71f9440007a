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
from typing import ClassVar, TypeVar

from fleetgen.errors import ConfigError
from fleetgen.rows.idhash import id_hash

_SPEC = re.compile(r"^(\d+)/(\d+)$")
T = TypeVar("T")


@dataclass(frozen=True)
class Shard:
    """Shard `index` of `count` (0-based)."""

    METAVAR: ClassVar[str] = "i/N"  # how --help and the config reference name its written form

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

    def __str__(self) -> str:
        """The i/N form parse reads: what a config file, a flag and job.json write."""
        return f"{self.index}/{self.count}"

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
