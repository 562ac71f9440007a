"""Where a job's requests go: the endpoints (a fleet's, or given), the model they serve, the window each starts with."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass

import aiohttp

from fleetgen.errors import ConfigError, NoReplicaError
from fleetgen.fleet.state import read_state
from fleetgen.generate.config import GenerateConfig
from fleetgen.generate.dispatch import client

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
    mine = config.sharding.replicas  # the whole fleet, unless this process drives a slice of it
    if config.fleet_state is not None:
        fleet = read_state(config.fleet_state)
        if not fleet.replicas:
            raise ConfigError(
                f"fleet state {config.fleet_state} lists no replicas", hint="start one with `fleetgen up`"
            )
        if fleet.api_key_required and not key:
            raise ConfigError("the fleet requires an API key", hint="pass --api-key or set FLEETGEN_API_KEY")
        running = fleet.max_running_requests
        default = (running + WINDOW_QUEUE) if running else DEFAULT_WINDOW
        endpoints, model, path = mine.of(fleet.endpoints), config.model or fleet.served_model_name, fleet.model
    else:
        default, endpoints, model, path = DEFAULT_WINDOW, mine.of(list(config.endpoints)), config.model, None
    routing = config.routing
    return Target(endpoints, model, routing.window(default), key, routing.auto, path)


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
