"""Which backend runs a fleet: by its recorded state, or by the config of one about to start."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # a backend loads when a fleet needs one (`status`, `down` of no fleet load none)
    from fleetgen.fleet.backend import Backend
    from fleetgen.fleet.config import FleetConfig
    from fleetgen.fleet.state import FleetState


def backend_for(state: FleetState) -> Backend:
    """The backend of a fleet that was started (status, down, the supervisor, restarts)."""
    if state.backend == "ray":
        from fleetgen.fleet.ray_backend import RayBackend  # Ray is an optional extra

        return RayBackend(state.ray_address, state.fleet_id)
    from fleetgen.fleet.local import LocalBackend

    return LocalBackend()


def backend_for_config(config: FleetConfig) -> Backend:
    """The backend that will start the fleet `config` describes."""
    if config.ray is not None:
        from fleetgen.fleet.ray_backend import RayBackend

        return RayBackend(config.ray)
    from fleetgen.fleet.local import LocalBackend

    return LocalBackend()
