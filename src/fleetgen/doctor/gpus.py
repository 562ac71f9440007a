"""GPUs, driver and the CUDA version the driver supports, through NVML (nvidia-ml-py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from fleetgen.doctor.report import Check, Status
from fleetgen.gpu_info import GpuInfo, discover_gpus


@dataclass(frozen=True)
class NvmlSnapshot:
    """What NVML said; `error` says why there is nothing (no driver, no nvidia-ml-py)."""

    gpus: list[GpuInfo] = field(default_factory=list)
    driver_version: str | None = None
    cuda_driver: tuple[int, int] | None = None  # highest CUDA the driver runs, e.g. (13, 0)
    error: str | None = None

    @property
    def archs(self) -> list[tuple[int, int]]:
        return sorted({g.compute_capability for g in self.gpus})


def read_nvml() -> NvmlSnapshot:
    try:
        import pynvml
    except ImportError:
        return NvmlSnapshot(error="nvidia-ml-py is not installed (pip install 'fleetgen[gpu]')")
    try:
        pynvml.nvmlInit()
    except Exception as e:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return NvmlSnapshot(error=f"NVML did not start: {e}")
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        cuda = int(pynvml.nvmlSystemGetCudaDriverVersion_v2())
    finally:
        pynvml.nvmlShutdown()
    return NvmlSnapshot(
        gpus=discover_gpus(),
        driver_version=driver.decode() if isinstance(driver, bytes) else driver,
        cuda_driver=(cuda // 1000, (cuda % 1000) // 10),
    )


def sm(cc: tuple[int, int]) -> str:
    return f"sm_{cc[0]}{cc[1]}"


def check_gpus(snap: NvmlSnapshot) -> Check:
    if not snap.gpus:
        why = snap.error or "NVML reports no GPU"
        return Check(
            id="gpu.devices",
            status=Status.SKIP,
            summary=f"no GPU ({why}); GPU checks skipped, use the CPU engine: --engine vllm --gpus none",
            cause="no_gpu",
            evidence={"nvml": why},
        )
    names = sorted({g.name for g in snap.gpus})
    return Check(
        id="gpu.devices",
        status=Status.OK,
        summary=(
            f"{len(snap.gpus)} x {', '.join(names)} ({', '.join(sm(a) for a in snap.archs)}), "
            f"driver {snap.driver_version} (CUDA {snap.cuda_driver[0]}.{snap.cuda_driver[1]})"
            if snap.cuda_driver
            else f"{len(snap.gpus)} x {', '.join(names)}"
        ),
        evidence={
            "driver_version": snap.driver_version,
            "cuda_driver": ".".join(map(str, snap.cuda_driver)) if snap.cuda_driver else None,
            "gpus": [
                {
                    "index": g.index,
                    "name": g.name,
                    "compute_capability": f"{g.compute_capability[0]}.{g.compute_capability[1]}",
                    "memory_gib": round(g.memory_total / 2**30, 1),
                }
                for g in snap.gpus
            ],
        },
    )
