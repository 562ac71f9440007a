"""The data-parallel fleet: start, check and stop N replicas of an inference engine."""

from fleetgen.fleet.config import FleetConfig
from fleetgen.fleet.launcher import up
from fleetgen.fleet.state import FleetState, ReplicaState, read_state
from fleetgen.fleet.status import ReplicaStatus, fleet_status
from fleetgen.fleet.stop import down
from fleetgen.fleet.verify import ReplicaProgress

__all__ = [
    "FleetConfig",
    "FleetState",
    "ReplicaProgress",
    "ReplicaState",
    "ReplicaStatus",
    "down",
    "fleet_status",
    "read_state",
    "up",
]
