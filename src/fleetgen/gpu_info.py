"""The GPUs this machine sees, through NVML: what the doctor reports on and a local fleet lays replicas out on.

Below both `doctor` and `fleet`, so neither reaches up into the other for it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    memory_total: int
    compute_capability: tuple[int, int]


def discover_gpus() -> list[GpuInfo]:
    """GPUs seen through NVML; an empty list where there is no driver or no nvidia-ml-py."""
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except Exception:
        return []
    try:
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(h)
            gpus.append(
                GpuInfo(
                    index=i,
                    name=name.decode() if isinstance(name, bytes) else name,
                    memory_total=int(pynvml.nvmlDeviceGetMemoryInfo(h).total),
                    compute_capability=tuple(pynvml.nvmlDeviceGetCudaComputeCapability(h)),
                )
            )
        return gpus
    finally:
        pynvml.nvmlShutdown()
