"""What a later replica of a shared GPU is given: measured bytes and a KV pool (fleet/equal_memory.py measures them)."""

from __future__ import annotations

import math
from dataclasses import dataclass

# What a starting SGLang replica takes before it measures the free memory (its CUDA context and
# torch.distributed): the H200's second replica saw 0.71 GiB less than the first had left free.
START_RESERVE_BYTES = 1 << 30
# The most of the free memory a later replica may be told to take: the rest holds its graphs and activations.
MOST_OF_FREE = 0.95


@dataclass(frozen=True)
class EqualShare:
    """What a later replica of a shared GPU is given: the static memory and KV pool its first replica took.

    SGLang 0.5.12 sizes the KV pool as mem_fraction_static x (memory free before the weights load)
    - weights (model_runner_kv_cache_mixin._profile_available_bytes), then caps it at
    --max-total-tokens (_apply_token_constraints). A fraction of `static_bytes` over what this replica
    will find free gives it at least the first one's pool; the cap makes the pools equal.
    """

    static_bytes: int  # the first replica's fraction x the memory free as it started: weights + KV pool
    kv_tokens: int | None  # the first replica's KV pool as it reported it (None: it did not say)
    free_bytes: int  # the GPU's free memory as this replica starts

    def fraction(self) -> float | None:
        """The fraction of the free memory that holds `static_bytes`; None where it does not fit.

        Where a cap makes the pools equal it errs up (the cap binds); without one, this replica's pool
        becomes the others' cap, so it errs down and theirs, erring up, can reach it.
        """
        room = self.free_bytes - START_RESERVE_BYTES
        if room <= 0:
            return None
        exact = self.static_bytes / room * 10_000
        f = (math.ceil(exact - 1e-6) if self.kv_tokens else math.floor(exact + 1e-6)) / 10_000
        return f if 0 < f <= MOST_OF_FREE else None
