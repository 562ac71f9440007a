"""Where a job's requests go: the endpoints (a fleet's, or given), the model they serve, the window each starts with."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass

import aiohttp

from fleetgen.errors import ConfigError, NoReplicaError
from fleetgen.fleet.state import read_state
from fleetgen.generate.config import GenerateConfig
from fleetgen.generate.config.partition import Shard
from fleetgen.generate.dispatch import client
from fleetgen.generate.dispatch.dispatcher import DispatchPolicy

DEFAULT_WINDOW = 64
# Requests queued on each server beyond what it runs at once, so a finished slot never waits on us.
WINDOW_QUEUE = 8


@dataclass(frozen=True)
class Target:
    """Where requests go: endpoints, the model they serve, the window per replica (where auto starts)."""

    endpoints: list[str]
    model: str | None
    window: int
    api_key: str | None
    auto: bool = False  # --concurrency auto: the windows follow the engines' load (load_poll.py)
    model_path: str | None = None  # what the fleet's engines load (its state's model); None for --endpoint


def resolve_target(config: GenerateConfig) -> Target:
    """Endpoints from the fleet state or --endpoint, with the API key from config or FLEETGEN_API_KEY."""
    key = config.api_key.get_secret_value() if config.api_key else (os.environ.get("FLEETGEN_API_KEY") or None)
    mine = Shard.parse(config.replica_slice)  # the whole fleet, unless this process drives a slice of it
    if config.fleet_state is not None:
        fleet = read_state(config.fleet_state)
        if not fleet.replicas:
            raise ConfigError(f"fleet state {config.fleet_state} lists no replicas", hint="start one with `fleetgen up`")
        if fleet.api_key_required and not key:
            raise ConfigError("the fleet requires an API key", hint="pass --api-key or set FLEETGEN_API_KEY")
        running = fleet.max_running_requests
        default = (running + WINDOW_QUEUE) if running else DEFAULT_WINDOW
        endpoints, model, path = mine.of(fleet.endpoints), config.model or fleet.served_model_name, fleet.model
    else:
        default, endpoints, model, path = DEFAULT_WINDOW, mine.of(list(config.endpoints)), config.model, None
    auto = config.concurrency == "auto"
    return Target(endpoints, model, default if auto else int(config.concurrency), key, auto, path)


def dispatch_policy(config: GenerateConfig) -> DispatchPolicy:
    """The dispatcher's policy, from the job's config."""
    return DispatchPolicy(
        least_outstanding=config.dispatch == "least-outstanding",
        prefix_affinity=config.prefix_affinity,
        prefix_routing=config.prefix_routing,
        hedge=config.hedge,
        hedge_after_s=config.hedge_after_s,
        max_attempts=config.max_attempts,
        backoff_base_s=config.backoff_base_s,
        backoff_max_s=config.backoff_max_s,
        failures_to_eject=config.replica_failures,
        cooldown_s=config.replica_cooldown_s,
        give_up_after_s=config.give_up_after_s,
        stall_factor=config.stall_factor,
        stall_floor_s=config.stall_floor_s,
    )


async def check_endpoints(http: aiohttp.ClientSession, target: Target) -> tuple[str, int | None]:
    """The model every reachable endpoint serves, and its context length; unreachable ones are left to retry."""
    answers = await asyncio.gather(*(client.served_models(http, e) for e in target.endpoints))
    reachable = [(e, ids, ctx) for e, (ids, ctx) in zip(target.endpoints, answers) if ids]
    if not reachable:
        if target.model is None:
            raise NoReplicaError(
                f"no endpoint answers /v1/models: {', '.join(target.endpoints)}",
                hint="check that the servers are up (`fleetgen status`), or pass --model",
            )
        return target.model, None
    model = target.model or reachable[0][1][0]
    wrong = [f"{e} serves {ids}" for e, ids, _ in reachable if model not in ids]
    if wrong:
        raise ConfigError(
            f"not every endpoint serves model {model!r}: " + "; ".join(wrong),
            hint="every replica must serve the same model; pass --model or fix the endpoints",
        )
    contexts = [c for _, _, c in reachable if c]
    return model, (min(contexts) if contexts else None)
