"""Which replicas take work: out of rotation after failures in a row, back through one probe, give up when all are down.

A replica that keeps failing would keep taking requests and failing them, so after
`failures_to_eject` transient failures in a row it is taken out of rotation. After a cool-down
(doubled each time it is taken out again, up to MAX_COOLDOWN_S) one request probes it (half-open):
an answer, or a rejection (a 4xx is an answer too), puts it back; a failure takes it out again.
When no replica has been in rotation for `give_up_after_s` the run stops with NoReplicaError
rather than wait forever, and can be resumed. The warm-up gate (warmup.py) keeps a replica out the
same way until it has compiled the job's sampling kernels.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from fleetgen.errors import NoReplicaError
from fleetgen.generate.dispatch.client import TransientError
from fleetgen.generate.dispatch.replica import Replica
from fleetgen.generate.observe.stats import Clock

MAX_COOLDOWN_S = 60.0


class Rotation:
    """Takes the dispatcher's replicas out of rotation and back; all methods run on one event loop."""

    def __init__(
        self,
        replicas: list[Replica],
        clock: Clock,
        wake: Callable[[], None],
        *,
        failures_to_eject: int,
        cooldown_s: float,
        give_up_after_s: float,
    ) -> None:
        self.replicas = replicas  # the dispatcher's own list: a replacement changes it in place
        self.clock = clock
        self.wake = wake  # tells the dispatcher's waiters that a replica may be free again
        self.failures_to_eject = failures_to_eject
        self.cooldown_s = cooldown_s
        self.give_up_after_s = give_up_after_s
        self.all_down_since: float | None = None
        self.dead: str | None = None  # set when the run must stop: why (see give_up)

    def give_up(self) -> None:
        """Raise NoReplicaError with why the run stopped (call once `dead` is set)."""
        raise NoReplicaError(self.dead or "", hint="start or fix the servers, then run the same command to resume")

    def released(self, r: Replica, *, answered: bool, failure: TransientError | None) -> None:
        """A request on `r` ended: answered (an answer or a rejection), failed, or neither (cancelled)."""
        was_probe = r.probing
        r.probing = False
        if answered:
            r.consecutive_failures = 0
            if not r.in_rotation:
                r.stats.in_rotation = True
                r.cooldown = 0.0
            self.all_down_since = None
        elif failure is not None and failure.counts_against_replica:
            r.consecutive_failures += 1
            if was_probe or (r.in_rotation and r.consecutive_failures >= self.failures_to_eject):
                self._eject(r)

    def replaced(self) -> None:
        """A replica joined on a new address: the fleet is not all down any more."""
        self.all_down_since = None

    # --- the warm-up gate (warmup.py) ------------------------------------------------------

    def hold(self, r: Replica) -> None:
        """Keep `r` out of rotation until `admit`: it is compiling the job's sampling kernels."""
        r.stats.in_rotation = False
        r.stats.warming = True
        r.retry_at = float("inf")

    def admit(self, r: Replica) -> None:
        """`r` answered its warm-up: it takes work from now on."""
        r.stats.warming = False
        r.stats.in_rotation = True
        r.retry_at = 0.0
        self.all_down_since = None
        self.wake()

    def warmup_failed(self, r: Replica, why: str) -> None:
        """`r` stays out of this run; when every replica failed so, the run stops (NoReplicaError)."""
        r.stats.warming = False
        r.stats.warmup_error = why
        if all(x.stats.warmup_error for x in self.replicas):
            self.dead = "no replica finished its warm-up: " + "; ".join(
                x.stats.warmup_error or "" for x in self.replicas
            )
            self.wake()

    # --- out and back ------------------------------------------------------------------------

    def _eject(self, r: Replica) -> None:
        r.stats.in_rotation = False
        r.stats.ejections += 1
        r.cooldown = min(MAX_COOLDOWN_S, r.cooldown * 2 if r.cooldown else self.cooldown_s)
        r.retry_at = self.clock() + r.cooldown
        loop = asyncio.get_running_loop()
        loop.call_later(r.cooldown, self._cooldown_over, r)
        if not any(x.in_rotation or x.stats.warming for x in self.replicas) and self.all_down_since is None:
            self.all_down_since = self.clock()
            loop.call_later(self.give_up_after_s, self._check_dead)

    def _check_dead(self) -> None:
        if self.all_down_since is None or any(x.in_rotation or x.stats.warming for x in self.replicas):
            return
        down_for = self.clock() - self.all_down_since
        if down_for >= self.give_up_after_s * 0.999:
            self.dead = (
                f"no replica has answered for {down_for:.0f}s "
                f"({', '.join(r.endpoint for r in self.replicas)}); stopped cleanly, the job can be resumed"
            )
            self.wake()
        else:
            asyncio.get_running_loop().call_later(self.give_up_after_s - down_for, self._check_dead)

    def _cooldown_over(self, r: Replica) -> None:
        # A loop's timer can fire before our clock reaches retry_at (uvloop counts whole milliseconds):
        # waking then would find the replica still cooling and nothing would wake the waiters again.
        left = r.retry_at - self.clock()
        if left > 0 and not r.in_rotation:
            asyncio.get_running_loop().call_later(max(left, 0.001), self._cooldown_over, r)
        else:
            self.wake()
