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


def free_memory(indices: tuple[int, ...] | list[int]) -> int | None:
    """Bytes free on the fullest of these GPUs now (NVML), as an
    engine starting there would find them; None where unreadable."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        return min(int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(i)).free) for i in indices)
    except Exception:
        return None
    finally:
        pynvml.nvmlShutdown()
