"""The data-parallel fleet: start, check and stop N replicas of an inference engine."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleetgen._lazy import lazy_exports

# public name -> the module defining it; loaded on first use (see fleetgen._lazy)
_EXPORTS = {
    "FleetConfig": "fleetgen.fleet.config",
    "FleetState": "fleetgen.fleet.state",
    "ReplicaProgress": "fleetgen.fleet.verify",
    "ReplicaState": "fleetgen.fleet.state",
    "ReplicaStatus": "fleetgen.fleet.status",
    "down": "fleetgen.fleet.stop",
    "fleet_status": "fleetgen.fleet.status",
    "read_state": "fleetgen.fleet.state",
    "up": "fleetgen.fleet.launcher",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from fleetgen.fleet.config import FleetConfig
    from fleetgen.fleet.launcher import up
    from fleetgen.fleet.state import FleetState, ReplicaState, read_state
    from fleetgen.fleet.status import ReplicaStatus, fleet_status
    from fleetgen.fleet.stop import down
    from fleetgen.fleet.verify import ReplicaProgress

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
