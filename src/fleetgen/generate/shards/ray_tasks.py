"""The shards of `generate --shards N` as Ray tasks: one task per shard, wherever the cluster has a free CPU.

A task runs `generate` for its shard on its node, into the output directory every node must see
(checked first, through a file the driver wrote there). Ray starts a task again when its worker
dies (`max_retries`: a killed process, a lost node); the new attempt opens the shard's journal and
resumes, so the retry costs only the rows that were in flight. An error fleetgen raises on purpose
is not retried (`retry_exceptions=False`): it comes back as the shard's failure.
"""

from __future__ import annotations

import os

import ray
from ray.exceptions import RayError, RayTaskError

from fleetgen.errors import FleetgenError
from fleetgen.fleet.ray_backend import connect
from fleetgen.generate.config import GenerateConfig
from fleetgen.generate.runner import generate
from fleetgen.generate.shards.outcome import ShardDone, ShardFailed, ShardOutcome, check_visible
from fleetgen.logs import install_plain

# A shard's client is one event loop: one core.
TASK_CPUS = 1


@ray.remote(num_cpus=TASK_CPUS)
def shard_task(config: GenerateConfig, marker: str, token: str) -> dict:
    """One shard on the node Ray chose; returns where it ran and its stats."""
    install_plain()  # its notes go to the worker's stderr, which Ray shows at the driver
    where = f"node {ray.util.get_node_ip_address()} (pid {os.getpid()})"
    check_visible(config, marker, token, where)
    # Attempts of this shard in this run share the driver's token: a retry waits for an old attempt that still runs.
    config = config.updated(lease_group=token)
    stats = generate(config, handle_signals=False)  # a Ray worker's signals are Ray's
    return {"where": where, "stats": stats.to_dict()}


def run_on_ray(
    configs: list[GenerateConfig], address: str | None, retries: int, marker: str, token: str
) -> list[ShardOutcome]:
    """Submit one task per shard config, wait for all (in the order they finish), and say how each ended."""
    connect(address)
    refs = {
        shard_task.options(
            name=f"fleetgen-shard-{cfg.sharding.shard}", max_retries=retries, retry_exceptions=False
        ).remote(cfg, marker, token): cfg.sharding.rows.index
        for cfg in configs
    }
    pending, outcomes = list(refs), []
    try:
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            outcomes += [_outcome(refs[ref], ref, retries) for ref in ready]
    except KeyboardInterrupt:
        for ref in pending:
            ray.cancel(ref)  # a KeyboardInterrupt in the task: its journal is safe as under any kill
        raise
    return outcomes


def _outcome(index: int, ref: ray.ObjectRef, retries: int) -> ShardOutcome:
    try:
        out = ray.get(ref)
    except RayTaskError as e:
        cause = getattr(e, "cause", None)
        if isinstance(cause, FleetgenError):
            return ShardFailed(index, cause.message, cause.hint)
        return ShardFailed(
            index, f"its task raised {type(cause or e).__name__}: {cause or e}", "a bug: please report it"
        )
    except RayError as e:
        return ShardFailed(
            index,
            f"its Ray worker died {retries + 1} times ({type(e).__name__})",
            "see `ray logs` on the node; raise --shard-retries if nodes come and go",
        )
    return ShardDone(index, out["stats"], out["where"])
