"""torch in the engine's interpreter: version, CUDA build, whether it sees the GPUs, driver match."""

from __future__ import annotations

import re
from dataclasses import dataclass

from fleetgen.doctor.gpus import NvmlSnapshot, sm
from fleetgen.doctor.host import JSON_MARKER, Host
from fleetgen.doctor.report import Check, Fix, Status

_PROBE = f"""
import json, sys
out = {{}}
try:
    import torch
    out["version"] = torch.__version__
    out["cuda"] = torch.version.cuda
    out["available"] = bool(torch.cuda.is_available())
    out["device_count"] = torch.cuda.device_count() if out["available"] else 0
    out["capabilities"] = [list(torch.cuda.get_device_capability(i)) for i in range(out["device_count"])]
    out["arch_list"] = list(torch.cuda.get_arch_list()) if out["available"] else []
except Exception as e:
    out["error"] = type(e).__name__ + ": " + str(e)
sys.stdout.write({JSON_MARKER!r} + json.dumps(out) + "\\n")
"""


@dataclass(frozen=True)
class TorchInfo:
    version: str | None = None
    cuda: str | None = None  # "13.0"; None for a CPU build
    available: bool = False
    device_count: int = 0
    capabilities: tuple[tuple[int, int], ...] = ()
    arch_list: tuple[str, ...] = ()
    error: str | None = None

    @property
    def cuda_version(self) -> tuple[int, int] | None:
        m = re.match(r"(\d+)\.(\d+)", self.cuda or "")
        return (int(m.group(1)), int(m.group(2))) if m else None


def probe_torch(host: Host) -> TorchInfo:
    got = host.python_json(_PROBE)
    if "probe_error" in got:
        return TorchInfo(error=got["probe_error"])
    return TorchInfo(
        version=got.get("version"),
        cuda=got.get("cuda"),
        available=got.get("available", False),
        device_count=got.get("device_count", 0),
        capabilities=tuple(tuple(c) for c in got.get("capabilities", [])),
        arch_list=tuple(got.get("arch_list", [])),
        error=got.get("error"),
    )


def runs_on(arch_list: tuple[str, ...], cc: tuple[int, int]) -> bool:
    """torch runs on `cc` if it ships SASS for it (sm_90 also covers 9.x) or PTX of an older arch."""
    want = cc[0] * 10 + cc[1]
    for a in arch_list:
        m = re.match(r"(sm|compute)_(\d+)", a)
        if not m:
            continue
        n = int(m.group(2))
        if m.group(1) == "sm" and n // 10 == cc[0] and n <= want:
            return True
        if m.group(1) == "compute" and n <= want:
            return True
    return False


def check_torch(info: TorchInfo, snap: NvmlSnapshot, python: str) -> list[Check]:
    if info.error or not info.version:
        return [
            Check(
                id="torch.install",
                status=Status.FAIL,
                cause="torch_missing",
                summary=f"torch does not import in {python}: {info.error}",
                evidence={"python": python, "error": info.error},
                fix=Fix(
                    summary="install torch in the engine's interpreter", commands=[f"{python} -m pip install torch"]
                ),
            )
        ]
    ev = {"python": python, "version": info.version, "cuda": info.cuda}
    checks = [
        Check(
            id="torch.install",
            status=Status.OK,
            evidence=ev,
            summary=f"torch {info.version} ({'CUDA ' + info.cuda if info.cuda else 'CPU build'})",
        )
    ]
    if not snap.gpus:
        checks.append(
            Check(id="torch.cuda", status=Status.SKIP, cause="no_gpu", summary="no GPU: nothing for torch to see")
        )
        return checks
    ev = {
        "available": info.available,
        "device_count": info.device_count,
        "nvml_gpus": len(snap.gpus),
        "arch_list": list(info.arch_list),
        "cuda_driver": ".".join(map(str, snap.cuda_driver or ())) or None,
    }
    tcuda, dcuda = info.cuda_version, snap.cuda_driver
    if tcuda is None:
        checks.append(
            Check(
                id="torch.cuda",
                status=Status.FAIL,
                cause="torch_cpu_build",
                evidence=ev,
                summary=f"torch {info.version} is a CPU build but this machine has {len(snap.gpus)} GPU(s)",
                fix=Fix(summary="install a CUDA build of torch", commands=[_torch_for_driver(python, dcuda)]),
            )
        )
        return checks
    if dcuda and tcuda[0] > dcuda[0]:
        checks.append(
            Check(
                id="torch.cuda",
                status=Status.FAIL,
                cause="driver_too_old",
                evidence=ev,
                summary=f"torch is built for CUDA {info.cuda} but the driver supports CUDA {dcuda[0]}.{dcuda[1]} only",
                fix=Fix(
                    summary="upgrade the driver, or install torch built for the driver's CUDA",
                    commands=[_torch_for_driver(python, dcuda)],
                ),
            )
        )
        return checks
    missing = [sm(a) for a in snap.archs if not runs_on(info.arch_list, a)]
    if info.arch_list and missing:
        checks.append(
            Check(
                id="torch.cuda",
                status=Status.FAIL,
                cause="torch_arch_unsupported",
                evidence=ev,
                summary=f"torch {info.version} has no build for {', '.join(missing)} (it has "
                f"{' '.join(info.arch_list)})",
                fix=Fix(
                    summary="install a torch build that includes this architecture (CUDA >= 12.8 wheels for sm_120)",
                    commands=[_torch_for_driver(python, dcuda)],
                ),
            )
        )
        return checks
    if not info.available or info.device_count < len(snap.gpus):
        checks.append(
            Check(
                id="torch.cuda",
                status=Status.FAIL if not info.available else Status.WARN,
                cause="torch_sees_fewer_gpus",
                evidence=ev,
                summary=f"torch sees {info.device_count} GPU(s), NVML sees {len(snap.gpus)}",
                fix=Fix(summary="check CUDA_VISIBLE_DEVICES and that the driver and torch's CUDA agree"),
            )
        )
        return checks
    lower_minor = dcuda is not None and tcuda[0] == dcuda[0] and tcuda[1] > dcuda[1]
    checks.append(
        Check(
            id="torch.cuda",
            status=Status.WARN if lower_minor else Status.OK,
            evidence=ev,
            cause="driver_minor_older" if lower_minor else None,
            summary=(
                f"torch sees {info.device_count} GPU(s); CUDA {info.cuda} on a driver for CUDA "
                f"{dcuda[0]}.{dcuda[1]}" + (" (minor-version compatibility: PTX JIT may fail)" if lower_minor else "")
                if dcuda
                else f"torch sees {info.device_count} GPU(s)"
            ),
        )
    )
    return checks


def _torch_for_driver(python: str, driver_cuda) -> str:
    """The one command every torch/CUDA mismatch points to: torch built for the driver's CUDA."""
    return f"{python} -m pip install torch --index-url https://download.pytorch.org/whl/cu{_cu(driver_cuda)}"


def _cu(v: tuple[int, int] | None) -> str:
    return f"{v[0]}{v[1]}" if v else "130"
