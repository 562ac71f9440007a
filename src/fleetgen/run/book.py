"""Which stages of a job are done: a fingerprint of each stage's config and inputs, kept in WORKDIR."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

from fleetgen.atomic import write_atomic

STAGES = ("doctor", "mix", "generate", "export", "report")
MARKERS = "stages.json"


def fingerprint(section: object, *upstream: str | None) -> str:
    """A stage's identity: its config and the fingerprints of the stages it reads from."""
    payload = json.dumps([section, *upstream], sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


class StageBook:
    """The markers of a work directory; written atomically after each stage completes."""

    def __init__(self, workdir: Path) -> None:
        self.path = Path(workdir) / MARKERS
        try:
            self.done: dict[str, dict] = json.loads(self.path.read_text())
        except FileNotFoundError:
            self.done = {}

    def is_current(self, stage: str, fp: str) -> bool:
        return self.done.get(stage, {}).get("fingerprint") == fp

    def changed(self, stage: str, fp: str) -> bool:
        """Done before, with another config or other inputs."""
        return stage in self.done and not self.is_current(stage, fp)

    def invalidate_from(self, stage: str) -> list[str]:
        """Forget `stage` and every stage after it; returns those that were done."""
        later = STAGES[STAGES.index(stage) :]
        dropped = [s for s in later if s in self.done]
        for s in dropped:
            del self.done[s]
        self._save()
        return dropped

    def mark(self, stage: str, fp: str, **info: object) -> None:
        self.done[stage] = {"fingerprint": fp, "finished_at": time.time(), **info}
        self._save()

    def _save(self) -> None:
        write_atomic(self.path, json.dumps(self.done, indent=2, default=str))
