"""Run counters the library advances and any display reads; the summary written to stats.json."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Clock = Callable[[], float]


@dataclass
class ReplicaStats:
    """One replica's load and work; the dispatcher owns and advances it."""

    index: int
    endpoint: str
    window: int
    outstanding: int = 0
    requests: int = 0
    ok: int = 0
    failures: int = 0
    rejected: int = 0
    hedges: int = 0
    completion_tokens: int = 0
    prompt_tokens: int = 0
    in_rotation: bool = True
    ejections: int = 0


@dataclass
class Stats:
    """Counters of one run. `total` counts (id, sample) pairs in the prompt file (an estimate while reading)."""

    clock: Clock = time.monotonic
    total: int = 0
    resumed: int = 0
    ok: int = 0
    errors: int = 0
    input_errors: int = 0
    truncated: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    duplicates_dropped: int = 0
    turns_with_ids: int = 0
    turns_without_ids: int = 0
    started: float = field(default=0.0)
    finished: float | None = None
    interrupted: bool = False
    stopped_reason: str | None = None
    replicas: list[ReplicaStats] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.started = self.clock()

    @property
    def done(self) -> int:
        """Pairs recorded, this run and before it."""
        return self.resumed + self.ok + self.errors

    @property
    def elapsed_s(self) -> float:
        return (self.finished if self.finished is not None else self.clock()) - self.started

    @property
    def output_tokens_per_s(self) -> float:
        e = self.elapsed_s
        return self.completion_tokens / e if e > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        e = self.elapsed_s
        return {
            "rows": {
                "total": self.total,
                "resumed": self.resumed,
                "ok": self.ok,
                "errors": self.errors,
                "input_errors": self.input_errors,
                "truncated": self.truncated,
            },
            "tokens": {"prompt": self.prompt_tokens, "completion": self.completion_tokens},
            # Regenerated turns of this run's results with and without the server's token ids.
            "token_ids": {"turns_with": self.turns_with_ids, "turns_without": self.turns_without_ids},
            "wall_s": round(e, 3),
            "output_tokens_per_s": round(self.output_tokens_per_s, 2),
            "interrupted": self.interrupted,
            "stopped_reason": self.stopped_reason,
            "replicas": [
                {
                    "index": r.index,
                    "endpoint": r.endpoint,
                    "window": r.window,
                    "requests": r.requests,
                    "ok": r.ok,
                    "failures": r.failures,
                    "rejected": r.rejected,
                    "hedges": r.hedges,
                    "completion_tokens": r.completion_tokens,
                    "output_tokens_per_s": round(r.completion_tokens / e, 2) if e > 0 else 0.0,
                    "ejections": r.ejections,
                }
                for r in self.replicas
            ],
        }
