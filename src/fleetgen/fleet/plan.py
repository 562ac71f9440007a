"""Turn the fleet config into one spec per replica: engine settings, port and the backend's devices."""

from __future__ import annotations

import os
from pathlib import Path

from fleetgen.fleet.backend import Backend
from fleetgen.fleet.config import FleetConfig
from fleetgen.fleet.engines import ReplicaSpec
from fleetgen.models import model_cache_dir, served_name_for


def api_key_of(config: FleetConfig) -> str | None:
    """The key every server requires: the config's, else FLEETGEN_API_KEY, else none."""
    if config.api_key is not None:
        return config.api_key.get_secret_value()
    return os.environ.get("FLEETGEN_API_KEY") or None


def plan_replicas(config: FleetConfig, model_path: str, backend: Backend, count: int | None = None) -> list[ReplicaSpec]:
    """One spec per replica, on the devices the backend lays out (`count`: the size of a running fleet)."""
    devices = backend.layout(config, count)
    return replica_specs(config, model_path, [d.gpus for d in devices], [d.cpus for d in devices])


def replica_specs(
    config: FleetConfig, model_path: str, groups: list[tuple[int, ...]], cpus: list[tuple[int, ...]]
) -> list[ReplicaSpec]:
    """One spec per device group with the engine settings every replica shares."""
    served = config.served_model_name or served_name_for(config.model)
    key = api_key_of(config)
    extra_args = list(config.engine_args)
    if config.fix_dir is not None:
        from fleetgen.doctor import engine_args_for_replicas

        fix_args = engine_args_for_replicas(config.fix_dir)
        extra_args = [a for a in fix_args if a not in extra_args or not a.startswith("--")] + extra_args
    return [
        ReplicaSpec(
            index=i,
            model=model_path,
            served_model_name=served,
            host=config.host,
            port=config.port_base + i,
            gpus=groups[i],
            cpus=cpus[i],
            tp=config.tp,
            max_running_requests=config.max_running_requests,
            context_length=config.context_length,
            enforce_eager=config.enforce_eager,
            cpu_kv_cache_gb=config.cpu_kv_cache_gb,
            api_key=key,
            tool_call_parser=config.tool_call_parser,
            extra_args=tuple(extra_args),
            cache_dir=engine_cache_dir(config.engine, i),
            gpu_sharers=groups.count(groups[i]) if groups[i] else 1,
            gpu_slot=groups[:i].count(groups[i]) if groups[i] else 0,
        )
        for i in range(len(groups))
    ]


def engine_cache_dir(engine: str, index: int) -> Path:
    """Compile caches per replica slot, kept across fleets: replicas racing on one cache corrupt it."""
    return model_cache_dir().parent / "engine-cache" / f"{engine}-replica-{index}"
