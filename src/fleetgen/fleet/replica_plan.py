"""Turn the fleet config into one spec per replica: engine settings, port and the backend's devices."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from fleetgen.fleet.backend import Backend
from fleetgen.fleet.config import FleetConfig
from fleetgen.fleet.engines import ReplicaSpec, get_engine
from fleetgen.fleet.engines.sharing import given_share
from fleetgen.models import model_cache_dir, served_name_for


def api_key_of(config: FleetConfig) -> str | None:
    """The key every server requires: the config's, else FLEETGEN_API_KEY, else none."""
    if config.api_key is not None:
        return config.api_key.get_secret_value()
    return os.environ.get("FLEETGEN_API_KEY") or None


def plan_replicas(
    config: FleetConfig, model_path: str, backend: Backend, count: int | None = None
) -> list[ReplicaSpec]:
    """One spec per replica, on the devices the backend lays out (`count`: the size of a running fleet)."""
    devices = backend.layout(config, count)
    return replica_specs(
        config, model_path, [d.gpus for d in devices], [d.cpus for d in devices], [d.kind for d in devices]
    )


def replica_specs(
    config: FleetConfig,
    model_path: str,
    groups: list[tuple[int, ...]],
    cpus: list[tuple[int, ...]],
    kinds: list[str] | None = None,
) -> list[ReplicaSpec]:
    """One spec per device group with the engine settings every replica shares."""
    served = config.served_model_name or served_name_for(config.model)
    key = api_key_of(config)
    extra_args = list(config.engine_args)
    if config.fix_dir is not None:
        from fleetgen.doctor import engine_args_for_replicas

        fix_args = engine_args_for_replicas(config.fix_dir)
        extra_args = [a for a in fix_args if a not in extra_args or not a.startswith("--")] + extra_args
    specs = [
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
            prefix_cache=config.prefix_cache,
            extra_args=tuple(extra_args),
            cache_dir=(
                shared_cache_dir(config.engine, model_path, kinds[i])
                if kinds and kinds[i] and groups[i]
                else engine_cache_dir(config.engine, i)
            ),
            gpu_sharers=groups.count(groups[i]) if groups[i] else 1,
            gpu_slot=groups[:i].count(groups[i]) if groups[i] else 0,
        )
        for i in range(len(groups))
    ]
    flag = get_engine(config.engine).memory_flag
    for spec in specs:  # refused here, before the doctor runs or anything starts
        if flag and spec.on_gpu and spec.gpu_sharers > 1:
            given_share(spec, flag)
    return specs


def engine_cache_dir(engine: str, index: int) -> Path:
    """Compile caches per replica slot, kept across fleets, where replicas compile at once (CPU, Ray).

    A local CPU fleet starts its replicas together (warm-first does not pay there), and Ray places
    them itself: each slot keeps its own caches so that no two compile into one.
    """
    return model_cache_dir().parent / "engine-cache" / f"{engine}-replica-{index}"


def shared_cache_dir(engine: str, model: str, kind: str) -> Path:
    """One set of compile caches for every local GPU replica of this engine, model and GPU kind.

    Warm-first starts the first replica alone: the later ones load what it compiled (the JIT
    kernels, torch.compile/inductor and triton caches) instead of compiling it again; the H200's
    second replica on one GPU, given caches of its own, rebuilt the six sgl_kernel JIT kernels
    (BENCHMARKS.md, "figures the code cites"). The JIT builders lock each kernel's build (tvm-ffi 0.1.9
    `cpp/extension.py` FileLock, flashinfer 0.6 `jit/core.py`), and triton and inductor write
    their entries atomically, so replicas reading and adding to one cache do not corrupt it.
    """
    digest = hashlib.sha256(model.encode()).hexdigest()[:10]
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(model).name or "model")[:40]
    return model_cache_dir().parent / "engine-cache" / f"{engine}-{name}-{digest}-{kind}"
