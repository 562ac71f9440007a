"""A pretend GPU for stand-in SGLang replicas: its free memory, and SGLang 0.5.12's sizing of a KV pool from it.

No GPU here, so the memory is a number (in a JSON file when stand-in servers share it) and the
sizing is SGLang's, as 0.5.12 does it: `pre` is the memory free once the replica's CUDA context
is up (model_runner.py init_torch_distributed); after the weights load the KV pool gets
mem_fraction_static x pre - weights bytes (model_runner_kv_cache_mixin._profile_available_bytes),
in tokens of `cell` bytes (pool_configurator.DefaultPoolConfigurator), capped at --max-total-tokens
(_apply_token_constraints). A ready replica also holds `beyond` bytes more (context, graphs,
activations). The H100 and H200 numbers below reproduce what those GPUs reported (test_equal_pools.py).
"""

from __future__ import annotations

import fcntl
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

GIB = 1 << 30


@dataclass
class PretendGpu:
    free: int  # bytes free now (what NVML would say)
    context: int  # what a starting replica takes before it measures `pre`
    weights: int
    beyond: int  # what a ready replica holds beyond weights and pool, its context included
    cell: int  # KV bytes per token

    def start(self, fraction: float, cap: int | None = None) -> int:
        """The KV pool (tokens) of a replica starting now with these flags; its memory is taken."""
        pre = self.free - self.context
        tokens = int((pre * fraction - self.weights) // self.cell)
        if cap is not None:
            tokens = min(tokens, cap)
        if tokens <= 0:
            raise MemoryError("Not enough memory. Please try to increase --mem-fraction-static.")
        self.free -= self.footprint(tokens)
        return tokens

    def footprint(self, tokens: int) -> int:
        """What a ready replica with this pool holds; given back when it dies."""
        return self.weights + tokens * self.cell + self.beyond


# 8 replicas at 0.1 on one H100 (fixtures/h100-up8-notes.log): a 176M Qwen3 of 8 layers and 8 KV heads of 128
# (32768 bytes a token), 0.35 GiB of bf16 weights, 77.77 GiB found free by the first; 2.34 GiB beyond each.
H100 = dict(free=int(78.37 * GIB), context=int(0.6 * GIB), weights=int(0.35 * GIB), beyond=int(2.34 * GIB), cell=32768)
# 2 replicas on one H200 (fixtures/h200-replica-{0,1}.log): the same model; 139.13 GiB found free by the first.
H200 = dict(free=int(139.73 * GIB), context=int(0.6 * GIB), weights=int(0.36 * GIB), beyond=int(2.04 * GIB), cell=32768)


def write(path: Path, gpu: PretendGpu) -> None:
    path.write_text(json.dumps(asdict(gpu)))


@contextmanager
def locked(path: Path) -> Iterator[PretendGpu]:
    """The GPU in `path`, held by this process until the block ends (replicas of a GPU start one at a time)."""
    with open(path, "r+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        gpu = PretendGpu(**json.load(f))
        yield gpu
        f.seek(0)
        f.truncate()
        f.write(json.dumps(asdict(gpu)))


def free_of(path: Path) -> int:
    with locked(path) as gpu:
        return gpu.free
