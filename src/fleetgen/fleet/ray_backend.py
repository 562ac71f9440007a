"""Ray backend: each replica is a detached Ray actor that runs the engine server on its node.

Ray places the replicas (one STRICT_PACK placement group per replica, so a TP group stays on
one node) and each actor starts its server through `spawn`, with the Engine command line and
environment a local fleet uses. Planning, waiting, verification and the state are `launcher`'s,
as for every backend; this module only places, starts and answers for actors.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayError
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from fleetgen.errors import ConfigError, FleetError
from fleetgen.fleet.backend import Devices, Launch, Liveness, StartedReplica
from fleetgen.fleet.config import FleetConfig
from fleetgen.fleet.engines import Engine, ReplicaSpec
from fleetgen.fleet.logtail import LogFollower
from fleetgen.fleet.ray_actor import ReplicaServer
from fleetgen.fleet.state import FleetState, ReplicaState

NAMESPACE = "fleetgen"
# Calls to a replica's actor are tiny; longer than this means its node is unreachable.
ACTOR_CALL_TIMEOUT_S = 30.0


def connect(address: str | None) -> None:
    """Join the Ray cluster at `address` ('auto', host:port) once per process."""
    if ray.is_initialized():
        return
    try:
        ray.init(address=address, namespace=NAMESPACE, log_to_driver=False, logging_level="WARNING")
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise FleetError(
            f"cannot connect to the Ray cluster at {address!r}: {e}",
            hint="start one with `ray start --head` (then `ray start --address HEAD:6379` on the other nodes)",
        ) from None


async def _ask(ref: Any) -> Any:
    """Await one actor call without holding up the event loop; TimeoutError when the node does not answer.

    Shielded: a timeout gives up waiting, and the call's own future still completes (cancelling it would not
    stop the actor, and Ray would then complete a cancelled future)."""
    return await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(ref.future())), ACTOR_CALL_TIMEOUT_S)


class ActorLogFollower(LogFollower):
    """Follows a log that lives on the actor's node."""

    def __init__(self, actor: Any, path: str) -> None:
        super().__init__(Path(path))
        self.actor = actor

    async def _read_from(self, offset: int) -> bytes:
        try:
            return await _ask(self.actor.read_log.remote(offset))
        except (RayError, TimeoutError):
            return b""


def actor_liveness(actor: Any) -> Liveness:
    async def gone() -> str | None:
        try:
            code = await _ask(actor.poll.remote())
        except TimeoutError:
            return None  # slow, not known dead: the stall timeout decides
        except RayError as e:
            return _died(e)
        return _exited(code)

    return gone


def _died(e: RayError) -> str:
    return f"its Ray actor died ({type(e).__name__}; node lost?)"


def _exited(code: int | None) -> str | None:
    return None if code is None else f"the server exited with code {code}"


def _gone_now(actor: Any) -> str | None:
    """`actor_liveness` for callers outside an event loop (status, the supervisor's thread)."""
    try:
        code = ray.get(actor.poll.remote(), timeout=ACTOR_CALL_TIMEOUT_S)
    except GetTimeoutError:
        return None
    except RayError as e:
        return _died(e)
    return _exited(code)


def _use_gpus(config: FleetConfig) -> bool:
    if config.gpus not in ("all", "none"):
        raise ConfigError(
            f"--gpus {config.gpus}: device ids mean nothing across a Ray cluster",
            hint="use --gpus all (Ray assigns GPUs to each replica) or --gpus none (CPU replicas)",
        )
    on_gpu = config.gpus == "all" and ray.cluster_resources().get("GPU", 0) > 0
    if not on_gpu and config.engine != "vllm":
        raise ConfigError(
            f"engine {config.engine!r} needs GPUs and the Ray cluster has none",
            hint="use --engine vllm with the CPU build on CPU nodes",
        )
    return on_gpu


def _bundle(config: FleetConfig, on_gpu: bool) -> dict[str, float]:
    bundle = {"CPU": config.ray_num_cpus, **config.ray_resources}
    if on_gpu:
        bundle["GPU"] = config.tp
    return {k: v for k, v in bundle.items() if v > 0}


def _names(fleet_id: str, index: int) -> str:
    """Actor and placement group name of one replica; a replacement gets a fresh suffix."""
    return f"fleetgen-{fleet_id}-replica-{index}-{uuid.uuid4().hex[:6]}"


def _actor(name: str | None) -> Any | None:
    if not name:
        return None
    try:
        return ray.get_actor(name, namespace=NAMESPACE)
    except ValueError:
        return None


def _kill(name: str) -> None:
    actor = _actor(name)
    if actor is not None:
        ray.kill(actor, no_restart=True)
    try:
        pg = ray.util.get_placement_group(name)
    except ValueError:
        return
    remove_placement_group(pg)


def _leftover_actors(fleet_id: str) -> list[str]:
    """Actors of this fleet not (yet) in the state: a launch cut short, a replacement never recorded."""
    prefix = f"fleetgen-{fleet_id}-"
    return [
        info["name"]
        for info in ray.util.list_named_actors(all_namespaces=True)
        if info.get("namespace") == NAMESPACE and info.get("name", "").startswith(prefix)
    ]


def _remove_leftover_groups(fleet_id: str) -> None:
    """Placement groups of this fleet that no actor took (placed, then the launch was cut short)."""
    prefix = f"fleetgen-{fleet_id}-"
    for pg_info in ray.util.placement_group_table().values():
        if pg_info.get("name", "").startswith(prefix) and pg_info.get("state") != "REMOVED":
            _kill(pg_info["name"])


class RayBackend:
    """Replicas are Ray actors wherever the cluster has room; every question goes to the replica's actor."""

    name = "ray"

    def __init__(self, address: str | None, fleet_id: str | None = None) -> None:
        """Join the cluster; a fleet about to start gets a fresh id (the prefix of its actors' names)."""
        connect(address)
        self.fleet_id = fleet_id or uuid.uuid4().hex[:8]

    def fleet_fields(self) -> dict[str, object]:
        return {"backend": self.name, "ray_address": ray.get_runtime_context().gcs_address, "fleet_id": self.fleet_id}

    def layout(self, config: FleetConfig, count: int | None = None) -> list[Devices]:
        """Devices are Ray's to assign at placement; only the count is planned (default: cluster GPUs // tp)."""
        on_gpu = _use_gpus(config)
        n = count or config.replicas
        if n is None and on_gpu:
            n = int(ray.cluster_resources().get("GPU", 0)) // config.tp
            if n < 1:
                raise ConfigError(f"the Ray cluster has fewer GPUs than --tp {config.tp}", hint="lower --tp")
        return [Devices()] * (n or 1)

    def resolve_model(self, config: FleetConfig, running: FleetState | None = None) -> str:
        """The name as given, also on a restart: each actor resolves it on its node (`ReplicaServer.start`),
        where an embedded model's path or a local checkpoint is what that node has."""
        return config.model

    def default_python(self, chosen: str | None) -> str | None:
        """None unless chosen: each actor runs its node's interpreter (this one's path may not exist there)."""
        return chosen

    def check_ports(self, specs: list[ReplicaSpec]) -> None:
        """Nothing here: a port is free or not on the node the replica lands on, not on this machine;
        each actor checks its own when it starts (`ReplicaServer.start`), before the server runs."""

    def preflight(self, config: FleetConfig, specs: list[ReplicaSpec], python: str | None) -> None:
        """Nothing here: the doctor inspects this machine's GPUs and toolchain, which are not the nodes'.
        A node whose engine cannot start shows it as that replica's start failure, with its log's tail."""

    def validate_commands(self, engine: Engine, specs: list[ReplicaSpec], python: str | None) -> None:
        """Nothing here: the check runs the nodes' interpreter, which this machine may lack; a command a
        node's engine refuses fails that replica's start, and `wait_ready` reports its log's fatal line."""

    def exposure_warning(self, config: FleetConfig) -> str | None:
        """Always, without a key: an actor binds its node's address (or all of them), reachable from the cluster."""
        return (
            "warning: replicas listen on their node's address without an API key: anyone who reaches "
            "the node can use them (set --api-key or FLEETGEN_API_KEY)"
        )

    async def start(self, config: FleetConfig, launch: Launch) -> StartedReplica:
        """Place one replica (a STRICT_PACK placement group), create its actor and start the server there."""
        spec = launch.spec
        on_gpu = _use_gpus(config)
        name = _names(self.fleet_id, spec.index)
        bundle = _bundle(config, on_gpu)
        pg = placement_group([bundle], strategy="STRICT_PACK", name=name, lifetime="detached")
        try:
            await asyncio.wait_for(pg.ready(), timeout=config.ray_schedule_timeout_s)
        except TimeoutError:
            remove_placement_group(pg)
            raise FleetError(
                f"Ray cannot place replica {spec.index} ({bundle}) within {config.ray_schedule_timeout_s:.0f}s; "
                f"available: {ray.available_resources()}",
                hint="add nodes, free resources, or ask for fewer replicas (--replicas)",
            ) from None
        actor = ReplicaServer.options(
            name=name,
            namespace=NAMESPACE,
            lifetime="detached",
            num_cpus=config.ray_num_cpus,
            num_gpus=config.tp if on_gpu else 0,
            resources=dict(config.ray_resources),
            scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=0),
        ).remote()
        bind_all = config.host in ("0.0.0.0", "::")
        try:
            replica = await actor.start.remote(
                launch.engine.name,
                spec,
                launch.python,
                launch.env,
                self.fleet_id,
                bind_all,
                launch.replacement,
                0 if on_gpu else max(1, int(config.ray_num_cpus)),
            )
        except RayError as e:
            _kill(name)
            raise FleetError(
                f"replica {spec.index} could not start on Ray: {e}", hint="read the actor's error above"
            ) from None
        replica.actor = name
        return StartedReplica(replica, actor_liveness(actor), ActorLogFollower(actor, replica.log_path))

    def alive(self, replica: ReplicaState) -> bool:
        actor = _actor(replica.actor)
        return actor is not None and _gone_now(actor) is None

    def usage(self, replica: ReplicaState) -> tuple[float | None, float | None]:
        actor = _actor(replica.actor)
        if actor is None:
            return None, None
        try:
            return tuple(ray.get(actor.usage.remote(), timeout=ACTOR_CALL_TIMEOUT_S))
        except (RayError, GetTimeoutError):
            return None, None

    def stop_replica(self, replica: ReplicaState, grace_s: float) -> int:
        """Stop the server through its actor (on its node), then kill the actor and free its placement group."""
        return self._stop_all([replica.actor], grace_s)

    def stop(self, state: FleetState, grace_s: float) -> int:
        """Every actor is asked at once and waited for together: a fleet stops in one grace period."""
        stopped = self._stop_all([r.actor for r in state.replicas], grace_s)
        if state.fleet_id:  # what a cut-short launch or restart left out of the state
            self._stop_all(_leftover_actors(state.fleet_id), grace_s=5)
            _remove_leftover_groups(state.fleet_id)
        return stopped

    def _stop_all(self, names: list[str | None], grace_s: float) -> int:
        """Each named actor stops its server tree (all at the same time), then is killed with its placement group."""
        calls = {name: actor.stop.remote(grace_s) for name in names if (actor := _actor(name)) is not None}
        if calls:
            ray.wait(list(calls.values()), num_returns=len(calls), timeout=grace_s + ACTOR_CALL_TIMEOUT_S)
        stopped = 0
        for ref in calls.values():
            try:
                stopped += ray.get(ref, timeout=0)
            except (RayError, GetTimeoutError):
                pass  # the node is gone, and the server with it (the sentinel kills it when only the actor died)
        for name in names:
            if name:
                _kill(name)
        return stopped
