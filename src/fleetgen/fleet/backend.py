"""Where a fleet's replicas run (local processes or Ray actors): liveness, usage, restart and stop.

`status`, `down` and the supervisor ask the fleet's backend instead of checking pids, so they
work the same whether a replica is a process here or an actor on another node.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from fleetgen.fleet.launcher import ProgressCallback, restart_replica
from fleetgen.fleet.process import is_alive, stop_processes
from fleetgen.fleet.state import FleetState, ReplicaState


class Backend(Protocol):
    def alive(self, replica: ReplicaState) -> bool:
        """The replica's server process still runs (not whether it answers)."""

    def usage(self, replica: ReplicaState) -> tuple[float | None, float | None]:
        """(memory MiB, GPU memory MiB) of the replica's processes; None where unknown."""

    async def restart(
        self, state_dir: Path, index: int, *, api_key: str | None = None, on_progress: ProgressCallback | None = None
    ) -> ReplicaState:
        """Replace replica `index` with a verified one and record it in the state."""

    def stop(self, state: FleetState, grace_s: float) -> int:
        """Stop every replica; returns how many processes were stopped."""


class LocalBackend:
    """Replicas are detached processes on this machine."""

    def alive(self, replica: ReplicaState) -> bool:
        return is_alive(replica.pid, replica.create_time)

    def usage(self, replica: ReplicaState) -> tuple[float | None, float | None]:
        from fleetgen.fleet.status import gpu_memory_of, memory_of

        if not self.alive(replica):
            return None, None
        return memory_of(replica), (gpu_memory_of(replica) if replica.gpus else None)

    async def restart(
        self, state_dir: Path, index: int, *, api_key: str | None = None, on_progress: ProgressCallback | None = None
    ) -> ReplicaState:
        return await restart_replica(state_dir, index, api_key=api_key, on_progress=on_progress)

    def stop(self, state: FleetState, grace_s: float) -> int:
        return len(stop_processes([(r.pid, r.create_time) for r in state.replicas], grace_s=grace_s))


def backend_for(state: FleetState) -> Backend:
    if state.backend == "ray":
        from fleetgen.fleet.ray_backend import RayBackend

        return RayBackend(state)
    return LocalBackend()
