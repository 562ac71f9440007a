"""A replica's memory share of a GPU it shares with others: the user's pass-through flag, checked, or fleetgen's split.

With `--replicas-per-gpu N`, a memory flag the user passes to the engine (SGLang
`--mem-fraction-static`, vLLM `--gpu-memory-utilization`) is read as what *each* replica may take
of the GPU, as it means for a replica alone. It is kept when the N replicas fit together; when they
do not, `up` refuses before anything starts, naming the flag and what would fit. Without the
flag, fleetgen splits a budget (the engine's) evenly among them, as before.

An engine that sizes its memory from what is free at its start (SGLang) is given, on each later
replica of a GPU, the bytes its first replica took, measured (memory_share.EqualShare), and that
replica's KV pool as a cap: the pools come out equal rather than shrinking with each replica's place.
"""

from __future__ import annotations

import math

from fleetgen.errors import ConfigError
from fleetgen.fleet.engines.base import ReplicaSpec, flag_value

# What the replicas of one GPU may take together: the rest holds each one's CUDA context, graphs
# and activations (under a tenth of an H200 for 8 small ones: BENCHMARKS.md, "figures the code cites").
SAFE_TOTAL = 0.9


def given_share(spec: ReplicaSpec, flag: str) -> float | None:
    """The per-replica share the user passed with `flag`, checked against the replicas sharing the GPU; None if none."""
    given = flag_value(spec.extra_args, flag)
    if given is None:
        return None
    try:
        value = float(given)
    except ValueError:
        raise ConfigError(
            f"{flag} {given!r} is not a number", hint=f"pass a fraction of the GPU, e.g. {flag} 0.1"
        ) from None
    if not 0 < value <= 1:
        raise ConfigError(
            f"{flag} {given} is not a fraction of the GPU", hint=f"pass a value in (0, 1], e.g. {flag} 0.1"
        )
    n = spec.gpu_sharers
    total = value * n
    if total > SAFE_TOTAL + 1e-9:
        most = math.floor(SAFE_TOTAL / n * 100) / 100
        gpus = ",".join(str(g) for g in spec.gpus)
        raise ConfigError(
            f"{n} replicas share GPU {gpus} at {flag} {given} each = {total:.2f} of the GPU, over the {SAFE_TOTAL} "
            "they may hold together",
            hint=f"pass at most {flag} {most} with {n} replicas per GPU, or fewer replicas (--replicas-per-gpu), "
            f"or leave {flag} out and fleetgen splits the GPU among them",
        )
    return value
