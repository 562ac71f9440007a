"""One server as dispatch sees it: its window, its counters, and where it stands in rotation.

Its own module because the dispatcher, the rotation (rotation.py) and hedging (hedging.py) all
handle replicas, and none of them should import another to name one.
"""

from __future__ import annotations

import asyncio

from fleetgen.generate.observe.stats import ReplicaStats


class Replica:
    """One server as the dispatcher sees it; its counters live in `stats`."""

    def __init__(self, index: int, endpoint: str, window: int, stall_after_s: float = 10.0) -> None:
        self.index = index
        self.endpoint = endpoint
        self.window = window
        self.stats = ReplicaStats(index=index, endpoint=endpoint, window=window, stall_after_s=stall_after_s)
        # Rotation state (rotation.py changes it; the dispatcher reads it when it chooses).
        self.consecutive_failures = 0
        self.retry_at = 0.0  # when out of rotation: earliest time a probe request may go
        self.cooldown = 0.0
        self.probing = False
        # Requests awaiting an answer here, in the order sent (task -> send time): what freeze.py reads and re-sends.
        self.inflight: dict[asyncio.Task | None, float] = {}
        self.pace: object | None = None  # freeze.py's record of its recent answers

    @property
    def outstanding(self) -> int:
        return self.stats.outstanding

    @property
    def in_rotation(self) -> bool:
        return self.stats.in_rotation

    def __repr__(self) -> str:
        return f"Replica({self.index}, {self.endpoint}, {self.outstanding}/{self.window})"
