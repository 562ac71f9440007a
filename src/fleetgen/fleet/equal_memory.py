"""Replicas sharing a GPU get equal KV pools: the later ones are given measured bytes and one pool as a cap.

For engines whose memory share is of what is free at their start (Engine.share_of_free_memory:
SGLang). Fractions computed from the replicas' places alone left out what each one holds beyond
its share (CUDA context, graphs, activations): 8 replicas at 0.1 on an H100 came out with pools
from 243K down to 141K tokens. Instead, the first replica of a GPU starts alone with its share;
the GPU's free memory is read (NVML) before it starts and again once it is ready, which gives
its share in bytes and what it holds beyond. Every later replica is given the same bytes over
what it will find free, and the pool of the reference replica as a cap (memory_share.EqualShare).
Where the first one's bytes do not fit the others, they get the most that fits, equal among
them, and `up` says so with the fraction that would make all equal; a restart is given the same.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from fleetgen.fleet.engines import Engine, ReplicaSpec
from fleetgen.fleet.engines.base import flag_value
from fleetgen.fleet.engines.memory_share import START_RESERVE_BYTES, EqualShare
from fleetgen.fleet.state import FleetState, GpuShare, ReplicaState
from fleetgen.gpu_info import free_memory

log = logging.getLogger(__name__)

GIB = 1 << 30
# Left free on a shared GPU once all its replicas are up: activations beyond what a replica used while starting.
FIT_RESERVE_BYTES = 2 << 30

Measure = Callable[[tuple[int, ...]], "int | None"]


def _gpus(gpus: tuple[int, ...] | list[int]) -> str:
    return ",".join(str(g) for g in gpus)


def _gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


@dataclass
class _Gpu:
    """What one `up` knows of one shared GPU."""

    free_before_first: int | None = None  # NVML, just before its first replica started
    first_index: int | None = None
    reference: GpuShare | None = None  # what each replica of the GPU is given: bytes, and the pool as a cap
    reduced: int | None = None  # bytes that fit the later replicas, below the first's: the next ready sets the pool


class EqualMemory:
    """One `up` (or one restart): for each shared GPU, the memory every replica of it is given."""

    def __init__(
        self, engine: Engine, *, measure: Measure | None = None, recorded: dict[tuple[int, ...], GpuShare] | None = None
    ) -> None:
        self.engine = engine
        self.measure = measure or free_memory  # NVML; tests pass a pretend GPU
        self.restarting = recorded is not None  # a restart is given what `up` recorded; it measures no first one
        self.gpus: dict[tuple[int, ...], _Gpu] = {g: _Gpu(reference=s) for g, s in (recorded or {}).items()}
        self.short: dict[int, str] = {}  # replica -> why it was not given the others' memory
        self.why: dict[tuple[int, ...], str] = {}  # GPU -> why its replicas' pools may differ (said once)

    @classmethod
    def of_fleet(cls, engine: Engine, state: FleetState, *, measure: Measure | None = None) -> EqualMemory:
        """For a restart: what `up` recorded on the fleet's replicas."""
        return cls(
            engine,
            measure=measure,
            recorded={tuple(r.gpus): r.gpu_share for r in state.replicas if r.gpu_share is not None},
        )

    def applies(self, spec: ReplicaSpec) -> bool:
        return self.engine.share_of_free_memory and spec.on_gpu and spec.gpu_sharers > 1

    def before_start(self, spec: ReplicaSpec) -> ReplicaSpec:
        """Read the GPU's free memory now; a later replica (or a restarted one) is given the others' memory."""
        if not self.applies(spec):
            return spec
        gpu = self.gpus.setdefault(spec.gpus, _Gpu())
        free = self.measure(spec.gpus)
        if free is None:
            self._unequal(spec, f"the free memory of GPU {_gpus(spec.gpus)} cannot be read (NVML)")
            return spec
        if spec.gpu_slot == 0 and not self.restarting:
            gpu.free_before_first = free
            return spec
        if gpu.reference is None:
            self._unequal(
                spec,
                "the fleet's state records no shared memory for it"
                if self.restarting
                else self.why.get(spec.gpus, "its first replica's memory was not measured"),
            )
            return spec
        if spec.gpu_slot == 1 and not self.restarting and not self._fit(spec, gpu, free):
            return spec
        if gpu.reduced is not None and spec.gpu_slot == 1 and not self.restarting:
            share = EqualShare(gpu.reduced, None, free)  # the first of the reduced ones: its pool becomes the cap
        else:
            share = EqualShare(gpu.reference.static_bytes, gpu.reference.kv_tokens, free)
        if share.fraction() is None:
            why = (
                f"GPU {_gpus(spec.gpus)} had {_gib(free)} free as it started, too little for "
                f"{_gib(share.static_bytes)} of weights and KV pool"
            )
            self.short[spec.index] = why
            log.warning(
                f"replica {spec.index} gets a smaller KV pool than the others on GPU {_gpus(spec.gpus)}: {why}; "
                f"pass a smaller {self.engine.memory_flag} or fewer --replicas-per-gpu"
            )
        return replace(spec, share=share)

    def _fit(self, spec: ReplicaSpec, gpu: _Gpu, free: int) -> bool:
        """Once the first replica is up: do its bytes fit every other replica of the GPU? Else the most that does.

        False where none fits at all: the replicas are left to fractions from their places.
        """
        first = gpu.reference
        assert first is not None and gpu.free_before_first is not None
        beyond = max(0, gpu.free_before_first - free - first.static_bytes)  # context, graphs, activations
        others = spec.gpu_sharers - 1
        fits = (free - FIT_RESERVE_BYTES) // others - beyond
        if fits >= first.static_bytes:
            log.info(
                f"replicas sharing GPU {_gpus(spec.gpus)}: each is given replica {gpu.first_index}'s "
                f"{_gib(first.static_bytes)} for weights and KV pool"
                + (f", and its pool of {first.kv_tokens} tokens as a cap" if first.kv_tokens else "")
            )
            return True
        # EqualShare's fraction errs up by at most START_RESERVE_BYTES of the free memory: keep that within `fits`.
        fits = int(fits * (free - START_RESERVE_BYTES) / free)
        if fits <= 0:
            self._unequal(
                spec,
                f"GPU {_gpus(spec.gpus)} has {_gib(free)} free beside its first replica, too little for "
                f"{others} more that each hold {_gib(beyond)} beyond their share",
            )
            return False
        gpu.reduced = fits
        whole = gpu.free_before_first
        most = math.floor(((whole - FIT_RESERVE_BYTES) / spec.gpu_sharers - beyond) / whole * 1000) / 1000
        self.why[spec.gpus] = f"replica {gpu.first_index}'s {_gib(first.static_bytes)} does not fit the other {others}"
        log.warning(
            f"replicas sharing GPU {_gpus(spec.gpus)}: replica {gpu.first_index} keeps its KV pool of "
            f"{first.kv_tokens} "
            f"tokens; the other {others} get {_gib(fits)} each for weights and KV pool, equal among them but less than "
            f"its {_gib(first.static_bytes)}: {spec.gpu_sharers} x ({_gib(first.static_bytes)} + the {_gib(beyond)} "
            "each "
            f"holds beyond it) is more than the {_gib(whole)} free; for equal pools pass "
            f"{self.engine.memory_flag} {max(most, 0):g} or fewer --replicas-per-gpu"
        )
        return True

    def after_ready(self, spec: ReplicaSpec, replica: ReplicaState, config: dict[str, object]) -> None:
        """A first (or first reduced) replica is measured: its bytes, and the KV pool it reports."""
        if not self.applies(spec):
            return
        gpu = self.gpus.get(spec.gpus)
        if gpu is None:
            return
        pool = config.get(self.engine.kv_pool_field) if self.engine.kv_pool_field else None
        tokens = int(pool) if isinstance(pool, (int, float)) and not isinstance(pool, bool) and pool > 0 else None
        if spec.gpu_slot == 0 and not self.restarting and gpu.free_before_first is not None and gpu.reference is None:
            fraction = flag_value(replica.command, self.engine.memory_flag) if self.engine.memory_flag else None
            if fraction is None:
                return
            static = int(float(fraction) * gpu.free_before_first)
            gpu.reference = GpuShare(static_bytes=static, kv_tokens=tokens)
            gpu.first_index = replica.index
            if tokens is None:
                log.warning(
                    f"replica {replica.index} reported no KV pool ({self.engine.kv_pool_field}): the other "
                    f"replicas of GPU {_gpus(spec.gpus)} get its {_gib(static)} but no cap, so their "
                    "pools may differ a little"
                )
        elif spec.gpu_slot == 1 and gpu.reduced is not None and not self.restarting:
            gpu.reference = GpuShare(static_bytes=gpu.reduced, kv_tokens=tokens)
        replica.gpu_share = gpu.reference

    def finish(self, replicas: list[ReplicaState]) -> None:
        """Record on each replica what its GPU's replicas are given
        (a restart gets it); warn of pools unequal unforeseen."""
        for r in replicas:
            gpu = self.gpus.get(tuple(r.gpus))
            if gpu is not None and gpu.reference is not None:
                r.gpu_share = gpu.reference
        field = self.engine.kv_pool_field
        if not field or not self.engine.share_of_free_memory:
            return
        groups: dict[tuple[int, ...], list[ReplicaState]] = {}
        for r in replicas:
            groups.setdefault(tuple(r.gpus), []).append(r)
        for gpus, group in groups.items():
            pools = {r.index: r.effective_config.get(field) for r in group}
            if len(group) < 2 or len(set(pools.values())) < 2 or gpus in self.why or self.short.keys() & pools.keys():
                continue  # equal, or the reason was said as it arose (record_configs lists the pools)
            listed = ", ".join(f"replica {i}: {n}" for i, n in sorted(pools.items()))
            log.warning(
                f"replicas sharing GPU {_gpus(gpus)} have unequal KV pools ({listed}): read their logs, "
                "SGLang warns 'max_total_tokens=... is larger than the profiled value' where one had less room"
            )

    def _unequal(self, spec: ReplicaSpec, why: str) -> None:
        """Fall back to fractions from the places alone; said once per GPU and reason."""
        self.short[spec.index] = why
        if self.why.get(spec.gpus) != why:
            self.why[spec.gpus] = why
            log.warning(
                f"replicas sharing GPU {_gpus(spec.gpus)} may get unequal KV pools (fractions from their "
                f"places, not measured bytes): {why}"
            )
