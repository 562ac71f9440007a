"""The checks of the JIT toolchain that SGLang, flashinfer and torch use in CUDA-graph capture.

CUDA_HOME, nvcc, layout, CCCL, ninja: what the host holds is found by cuda_toolkit.py; these checks judge it
against the GPUs and torch and name the fix.
"""

from __future__ import annotations

from pathlib import Path

from fleetgen.doctor.cuda_toolkit import Toolchain, first_existing, min_nvcc_for
from fleetgen.doctor.gpus import NvmlSnapshot, sm
from fleetgen.doctor.host import Host
from fleetgen.doctor.report import Check, Fix, Status


def _pip_cuda_suffix(major: int) -> str:
    return "-cu12" if major <= 12 else ""


def check_toolchain(
    tc: Toolchain | None, snap: NvmlSnapshot, torch_cuda: tuple[int, int] | None, host: Host
) -> list[Check]:
    if tc is None or not snap.gpus:
        return [
            Check(
                id="toolchain.cuda_home",
                status=Status.SKIP,
                cause="no_gpu",
                summary="no GPU: the CUDA JIT toolchain is not needed by the CPU engine",
            )
        ]
    major, minor = torch_cuda or snap.cuda_driver or (13, 0)
    have_overlay_source = tc.source_root is not None
    overlay_fix = (lambda s: Fix(summary=s, overlay=True)) if have_overlay_source else None
    home = tc.home
    checks = []
    ev = {
        "tried": home.tried,
        "cuda_home": str(home.path) if home.path else None,
        "source": home.source,
        "overlay": home.is_overlay,
    }
    if home.path is None or home.dangling:
        what = f"{home.source}={home.path} does not exist" if home.dangling else "no CUDA toolkit found"
        checks.append(
            Check(
                id="toolchain.cuda_home",
                status=Status.FAIL,
                cause="cuda_home_missing",
                evidence=ev,
                summary=f"{what} (tried {'; '.join(home.tried)})"
                + (f"; pip's CUDA is at {tc.source_root}" if have_overlay_source else ""),
                fix=overlay_fix(f"point CUDA_HOME at a fleetgen overlay built on {tc.source_root}")
                if have_overlay_source
                else Fix(
                    summary="install the CUDA runtime and compiler wheels",
                    commands=[
                        f"{host.python} -m pip install nvidia-cuda-runtime{_pip_cuda_suffix(major)}=={major}.{minor}.* "
                        f"nvidia-cuda-nvcc{_pip_cuda_suffix(major)}=={major}.{minor}.*"
                    ],
                ),
            )
        )
    else:
        checks.append(
            Check(
                id="toolchain.cuda_home",
                status=Status.OK,
                evidence=ev,
                summary=f"CUDA_HOME={home.path} (from {home.source})"
                + (" [fleetgen overlay]" if home.is_overlay else ""),
            )
        )
    checks.append(_check_nvcc(tc, snap, torch_cuda, host, overlay_fix))
    checks.append(_check_layout(tc, overlay_fix))
    checks.append(_check_cccl(tc, overlay_fix, host, major))
    checks.append(_check_ninja(host))
    return checks


def _check_nvcc(tc, snap, torch_cuda, host, overlay_fix) -> Check:
    home = tc.home.path
    ev = {
        "nvcc": str(tc.nvcc) if tc.nvcc else None,
        "elsewhere": str(tc.nvcc_elsewhere) if tc.nvcc_elsewhere else None,
        "version_text": tc.nvcc_text.splitlines()[-2:] if tc.nvcc_text else None,
    }
    major, minor = torch_cuda or snap.cuda_driver or (13, 0)
    if tc.nvcc is None and tc.nvcc_elsewhere is None:
        return Check(
            id="toolchain.nvcc",
            status=Status.FAIL,
            cause="nvcc_missing",
            evidence=ev,
            summary=f"nvcc not found ({f'not in {home}/bin, ' if home else ''}not on PATH, not in pip's CUDA): "
            "CUDA-graph capture and flashinfer JIT need it",
            fix=Fix(
                summary=f"install nvcc for CUDA {major}.{minor}, then run the doctor again for the overlay",
                commands=[
                    f"{host.python} -m pip install 'nvidia-cuda-nvcc{_pip_cuda_suffix(major)}=={major}.{minor}.*'"
                ],
            ),
        )
    where = tc.nvcc or tc.nvcc_elsewhere
    if tc.nvcc_version is None:
        return Check(
            id="toolchain.nvcc",
            status=Status.FAIL,
            cause="nvcc_broken",
            evidence=ev,
            summary=f"{where} --version did not print a release: {tc.nvcc_text[:200]!r}",
            fix=Fix(summary="reinstall the CUDA compiler"),
        )
    v = tc.nvcc_version
    too_old = [f"{sm(a)} needs >= {min_nvcc_for(a)[0]}.{min_nvcc_for(a)[1]}" for a in snap.archs if v < min_nvcc_for(a)]
    dropped = [sm(a) for a in snap.archs if v[0] >= 13 and a < (7, 5)]
    if too_old or dropped:
        return Check(
            id="toolchain.nvcc",
            status=Status.FAIL,
            cause="nvcc_arch_unsupported",
            evidence=ev,
            summary=f"nvcc {v[0]}.{v[1]} at {where} cannot compile for this GPU: "
            + "; ".join(too_old + [f"{d} was dropped in CUDA 13" for d in dropped]),
            fix=Fix(
                summary="install a CUDA toolkit new enough for the GPU and point CUDA_HOME at it",
                commands=[
                    f"{host.python} -m pip install 'nvidia-cuda-nvcc{_pip_cuda_suffix(major)}=={major}.{minor}.*'"
                ],
            ),
        )
    if tc.nvcc is None:
        return Check(
            id="toolchain.nvcc",
            status=Status.FAIL,
            cause="nvcc_outside_cuda_home",
            evidence=ev,
            summary=f"nvcc {v[0]}.{v[1]} is at {tc.nvcc_elsewhere}, not in CUDA_HOME/bin ({home}/bin): the JIT runs "
            "$CUDA_HOME/bin/nvcc",
            fix=overlay_fix("link nvcc into the CUDA_HOME overlay's bin/") if overlay_fix else None,
        )
    if torch_cuda and v[0] != torch_cuda[0]:
        return Check(
            id="toolchain.nvcc",
            status=Status.WARN,
            cause="nvcc_torch_major_mismatch",
            evidence=ev,
            summary=f"nvcc {v[0]}.{v[1]} but torch is built for CUDA {torch_cuda[0]}.{torch_cuda[1]}: JIT'd kernels "
            "may not link",
            fix=Fix(summary=f"use a CUDA {torch_cuda[0]}.x toolkit for CUDA_HOME"),
        )
    return Check(
        id="toolchain.nvcc",
        status=Status.OK,
        evidence=ev,
        summary=f"nvcc {v[0]}.{v[1]} at {where} builds {', '.join(sm(a) for a in snap.archs)}",
    )


def _check_layout(tc: Toolchain, overlay_fix) -> Check:
    home = tc.home.path
    if home is None or not home.is_dir():
        missing = ["lib64/", "lib64/libcudart.so", "lib64/stubs/libcuda.so"]
    else:
        missing = [
            n for n in ("lib64/", "lib64/libcudart.so", "lib64/stubs/libcuda.so") if not (home / n.rstrip("/")).exists()
        ]
    ev = {
        "cuda_home": str(home) if home else None,
        "missing": missing,
        "libcudart_source": str(tc.cudart) if tc.cudart else None,
        "libcuda_stub_source": str(tc.stub) if tc.stub else None,
    }
    if not missing:
        return Check(
            id="toolchain.cuda_layout",
            status=Status.OK,
            evidence=ev,
            summary=f"{home} has lib64/, libcudart.so and lib64/stubs/libcuda.so",
        )
    unsourced = [
        n
        for n, src in (("lib64/libcudart.so", tc.cudart), ("lib64/stubs/libcuda.so", tc.stub))
        if n in missing and src is None
    ]
    fix = (
        overlay_fix("build a CUDA_HOME overlay with lib64/, libcudart.so and stubs/libcuda.so")
        if overlay_fix and not unsourced
        else (
            Fix(
                summary=f"nothing on this machine provides {', '.join(unsourced)}; install the CUDA runtime (pip "
                "nvidia-cuda-runtime)"
            )
        )
    )
    return Check(
        id="toolchain.cuda_layout",
        status=Status.FAIL,
        cause="cuda_layout_incomplete",
        evidence=ev,
        summary=f"CUDA_HOME ({home or 'none'}) lacks {', '.join(missing)}: JIT builds link with -L$CUDA_HOME/lib64 "
        "-lcudart -lcuda",
        fix=fix,
    )


def _check_cccl(tc: Toolchain, overlay_fix, host: Host, major: int) -> Check:
    home = tc.home.path
    top = bool(home and (home / "include" / "nv" / "target").exists())
    sub = bool(home and (home / "include" / "cccl" / "nv" / "target").exists())
    ev = {
        "include/nv/target": top,
        "include/cccl/nv/target": sub,
        "found_at": str(tc.cccl_dir) if tc.cccl_dir else None,
    }
    if top:
        return Check(
            id="toolchain.cccl", status=Status.OK, evidence=ev, summary=f"CCCL headers at {home}/include (nv/target)"
        )
    if tc.cccl_dir is None:
        return Check(
            id="toolchain.cccl",
            status=Status.FAIL,
            cause="cccl_missing",
            evidence=ev,
            summary="CCCL headers (nv/target) not found in CUDA_HOME/include, include/cccl or pip's CUDA: flashinfer "
            "JIT fails",
            fix=Fix(
                summary="install the CCCL headers, then run the doctor again for the overlay",
                commands=[f"{host.python} -m pip install 'nvidia-cuda-cccl{_pip_cuda_suffix(major)}'"],
            ),
        )
    return Check(
        id="toolchain.cccl",
        status=Status.WARN if sub else Status.FAIL,
        cause="cccl_not_on_include_path",
        evidence=ev,
        summary=f"nv/target is under {tc.cccl_dir}, not {home}/include: host-compiled JIT sources do not find it",
        fix=overlay_fix("link CCCL's nv/, cuda/, cub/, thrust/ into the overlay's include/") if overlay_fix else None,
    )


def _check_ninja(host: Host) -> Check:
    found = host.which("ninja")
    if found:
        return Check(id="toolchain.ninja", status=Status.OK, evidence={"ninja": found}, summary=f"ninja at {found}")
    candidates = [Path(host.python).parent / "ninja"] + [
        sp / "ninja" / "data" / "bin" / "ninja" for sp in host.site_package_dirs()
    ]
    have = first_existing(candidates)
    ev = {"ninja": None, "searched": ["PATH"] + [str(c) for c in candidates], "found": str(have) if have else None}
    if have:
        return Check(
            id="toolchain.ninja",
            status=Status.FAIL,
            cause="ninja_not_on_path",
            evidence=ev,
            summary=f"ninja is at {have} but not on PATH: torch's JIT builds refuse to start without it",
            fix=Fix(summary=f"put {have.parent} on PATH", prepend={"PATH": [str(have.parent)]}),
        )
    return Check(
        id="toolchain.ninja",
        status=Status.FAIL,
        cause="ninja_missing",
        evidence=ev,
        summary="ninja not found: torch's JIT builds (flashinfer, CUDA-graph kernels) refuse to start without it",
        fix=Fix(
            summary="install ninja into the engine's interpreter", commands=[f"{host.python} -m pip install ninja"]
        ),
    )
