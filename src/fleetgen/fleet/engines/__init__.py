"""Engines by name."""

from __future__ import annotations

from fleetgen.errors import ConfigError
from fleetgen.fleet.engines.base import Engine, Metrics, Phase, ReplicaSpec
from fleetgen.fleet.engines.sglang import SglangEngine
from fleetgen.fleet.engines.vllm import VllmEngine

ENGINES: dict[str, type[Engine]] = {"vllm": VllmEngine, "sglang": SglangEngine}


def get_engine(name: str) -> Engine:
    try:
        return ENGINES[name]()
    except KeyError:
        raise ConfigError(f"unknown engine {name!r}", hint=f"choose one of: {', '.join(ENGINES)}") from None


__all__ = ["ENGINES", "Engine", "Metrics", "Phase", "ReplicaSpec", "get_engine"]
