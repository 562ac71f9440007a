"""The seam between fleetgen and the place its replicas run (this machine, a Ray cluster, ...).

A backend knows how to lay out devices, check a plan where its replicas will run (model, ports,
doctor, command lines), start one replica's server there, and answer for it afterwards (alive,
memory, stop). Everything else a fleet does — planning the specs, waiting with the phase line,
verification, recording the state, the warm-first start and restarts — lives once in `launcher`
and `verify` and drives any backend through this protocol without asking which one it is.
docs/backends.md says how to add one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Protocol

from fleetgen.fleet.config import FleetConfig
from fleetgen.fleet.engines.base import Engine, ReplicaSpec
from fleetgen.fleet.logtail import LogFollower
from fleetgen.fleet.state import FleetState, ReplicaState

Liveness = Callable[[], Awaitable[str | None]]
"""Why a starting server is gone (e.g. 'the server exited with code 1'), or None while it runs.

Awaited, so that asking a far node (which may hang) never holds up the other replicas' waits."""


class Devices(NamedTuple):
    """The GPUs and CPU cores one replica gets; empty where the backend assigns them at start."""

    gpus: tuple[int, ...] = ()
    cpus: tuple[int, ...] = ()
    kind: str = ""  # what compiled kernels depend on (GPU model and arch), e.g. "nvidia-h200-sm90"; "" unknown


@dataclass(frozen=True)
class Launch:
    """One replica to start: what runs (engine, spec, interpreter, environment) and where its log goes."""

    engine: Engine
    spec: ReplicaSpec
    python: str | None  # None: the interpreter of the place the replica runs
    env: dict[str, str]
    log_path: Path  # on this machine; a backend that runs elsewhere keeps the log there and reports its path
    replacement: bool = False  # a restart: the old server's port may linger, a backend may pick another


@dataclass
class StartedReplica:
    """A replica whose server was started (not yet verified): what the state records, and how to watch it."""

    replica: ReplicaState
    gone: Liveness
    log: LogFollower


class Backend(Protocol):
    """Where a fleet's replicas run. `launcher.up` and `launcher.restart_replica` drive it."""

    name: str
    """Recorded as the state's `backend`; `backend_lookup.backend_for` maps it back to the class."""

    def fleet_fields(self) -> dict[str, object]:
        """The FleetState fields that say where this fleet runs (backend name, cluster address, ids)."""

    def layout(self, config: FleetConfig, count: int | None = None) -> list[Devices]:
        """One Devices per replica; `count` is the size of a running fleet (a restart keeps its layout)."""

    def resolve_model(self, config: FleetConfig, running: FleetState | None = None) -> str:
        """The model the specs name, as the replicas will load it; `running`: a restart keeps what its fleet loaded."""

    def default_python(self, chosen: str | None) -> str | None:
        """The interpreter replicas run: `chosen`, else this
        backend's (None: whichever runs where each replica runs)."""

    def check_ports(self, specs: list[ReplicaSpec]) -> None:
        """Refuse before anything starts when a planned port is taken where its replica will listen."""

    def preflight(self, config: FleetConfig, specs: list[ReplicaSpec], python: str | None) -> None:
        """The doctor's verdict on where the replicas run (config.doctor, on GPUs); raises when it fails."""

    def validate_commands(self, engine: Engine, specs: list[ReplicaSpec], python: str | None) -> None:
        """The engine's check of the replicas' command lines against the interpreter that will run them."""

    def exposure_warning(self, config: FleetConfig) -> str | None:
        """What `up` warns when servers without an API key can be reached beyond this machine; None where not."""

    async def start(self, config: FleetConfig, launch: Launch) -> StartedReplica:
        """Start one replica's server where this backend runs things and describe it for the state."""

    def alive(self, replica: ReplicaState) -> bool:
        """The replica's server process still runs (not whether it answers)."""

    def usage(self, replica: ReplicaState) -> tuple[float | None, float | None]:
        """(memory MiB, GPU memory MiB) of the replica's processes; None where unknown."""

    def stop_replica(self, replica: ReplicaState, grace_s: float) -> int:
        """Stop one replica's server tree and free what holds it; returns how many processes were stopped."""

    def stop(self, state: FleetState, grace_s: float) -> int:
        """Stop every replica of the fleet at once (about one grace period, not one per replica) and anything
        a cut-short start left; returns processes stopped."""
