"""fleetgen: regenerate synthetic datasets with a target model on a fleet of inference servers."""

from fleetgen.errors import FleetgenError

__version__ = "0.1.0"

__all__ = ["FleetgenError", "__version__"]
