"""What the CUDA toolkit here holds (CUDA_HOME as the JIT resolves it, nvcc, libs, CCCL) and the overlay plan."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from fleetgen.doctor.host import Host
from fleetgen.doctor.report import OverlayPlan

OVERLAY_MARKER = ".fleetgen-overlay"

# Oldest nvcc that can compile for each architecture.
MIN_NVCC = {
    (7, 5): (10, 0),
    (8, 0): (11, 0),
    (8, 6): (11, 1),
    (8, 7): (11, 4),
    (8, 9): (11, 8),
    (9, 0): (11, 8),
    (10, 0): (12, 8),
    (10, 3): (12, 9),
    (11, 0): (13, 0),
    (12, 0): (12, 8),
    (12, 1): (12, 9),
}
# CUDA 13 dropped every architecture below Turing.
MAX_NVCC_FOR_OLD = {(13, 0): (7, 5)}
CCCL_NAMES = ("nv", "cuda", "cub", "thrust")


def min_nvcc_for(cc: tuple[int, int]) -> tuple[int, int]:
    if cc in MIN_NVCC:
        return MIN_NVCC[cc]
    same_major = [v for (ma, mi), v in MIN_NVCC.items() if ma == cc[0] and mi <= cc[1]]
    return max(same_major) if same_major else (12, 8) if cc[0] >= 10 else (11, 0)


def parse_nvcc_version(text: str) -> tuple[int, int] | None:
    m = re.search(r"release (\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


@dataclass
class CudaHome:
    """Where the JIT tools will look for CUDA, in the order they look (as torch.utils.cpp_extension does)."""

    path: Path | None
    source: str | None
    tried: list[str] = field(default_factory=list)
    dangling: bool = False  # set through a variable, but the directory does not exist

    @property
    def is_overlay(self) -> bool:
        return self.path is not None and (self.path / OVERLAY_MARKER).exists()


def resolve_cuda_home(host: Host) -> CudaHome:
    tried = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        v = host.env.get(var)
        tried.append(f"{var}={v}" if v else f"{var} unset")
        if v:
            return CudaHome(Path(v), var, tried, dangling=not Path(v).is_dir())
    nvcc = host.which("nvcc")
    tried.append(f"nvcc on PATH: {nvcc}" if nvcc else "no nvcc on PATH")
    if nvcc:
        return CudaHome(Path(nvcc).parent.parent, "nvcc on PATH", tried)
    d = host.default_cuda_home
    tried.append(f"{d}: {'exists' if d.is_dir() else 'missing'}")
    if d.is_dir():
        return CudaHome(d, str(d), tried)
    return CudaHome(None, None, tried)


@dataclass
class Toolchain:
    """Everything the toolchain checks found, and the overlay that would repair the layout."""

    home: CudaHome
    lib_dir: Path | None = None
    cudart: Path | None = None  # a versioned libcudart.so.N to point the unversioned name at
    stub: Path | None = None  # a libcuda.so to serve as lib64/stubs/libcuda.so
    cccl_dir: Path | None = None  # a dir holding nv/target, cuda/, cub/, thrust/
    nvcc: Path | None = None  # nvcc the JIT would run: $CUDA_HOME/bin/nvcc
    nvcc_elsewhere: Path | None = None  # an nvcc outside CUDA_HOME (PATH, pip) an overlay can use
    nvcc_version: tuple[int, int] | None = None
    nvcc_text: str = ""
    source_root: Path | None = None  # what the overlay mirrors


def _lib_dir(root: Path) -> Path | None:
    for d in (root / "lib64", root / "lib", root / "targets" / "x86_64-linux" / "lib"):
        if d.is_dir():
            return d
    return None


def first_existing(paths) -> Path | None:
    """The first of `paths` that exists on disk."""
    return next((p for p in paths if p is not None and p.exists()), None)


def inspect_toolchain(host: Host) -> Toolchain:
    home = resolve_cuda_home(host)
    tc = Toolchain(home=home)
    root = home.path if home.path and home.path.is_dir() else None
    pips = host.pip_cuda_roots()
    # pip trees only when the toolkit lacks a piece: a full toolkit is self-consistent and preferred.
    roots = ([root] if root else []) + pips
    tc.source_root = root or first_existing(r for r in pips if _lib_dir(r) and list(_lib_dir(r).glob("libcudart.so.*")))
    tc.lib_dir = _lib_dir(root) if root else None
    lib_dirs = [d for d in (_lib_dir(r) for r in roots) if d]
    cudarts = [p for d in lib_dirs for p in sorted(d.glob("libcudart.so.[0-9]*"), key=lambda p: len(p.name))]
    tc.cudart = cudarts[0] if cudarts else None
    stubs = [d / "stubs" / "libcuda.so" for d in lib_dirs]
    driver = host.ld_cache().get("libcuda.so.1") or host.ld_cache().get("libcuda.so")
    drivers = ([Path(driver)] if driver else []) + [d / "libcuda.so.1" for d in host.driver_lib_dirs]
    tc.stub = first_existing(stubs + drivers)
    cccl = []
    for r in roots:
        cccl += [r / "include", r / "include" / "cccl"]
    tc.cccl_dir = first_existing(d for d in cccl if (d / "nv" / "target").exists())
    if root and (root / "bin" / "nvcc").exists():
        tc.nvcc = root / "bin" / "nvcc"
    on_path = host.which("nvcc")
    tc.nvcc_elsewhere = first_existing(([Path(on_path)] if on_path else []) + [r / "bin" / "nvcc" for r in pips])
    if tc.nvcc_elsewhere and tc.nvcc and tc.nvcc_elsewhere.resolve() == tc.nvcc.resolve():
        tc.nvcc_elsewhere = None
    run_nvcc = tc.nvcc or tc.nvcc_elsewhere
    if run_nvcc:
        try:
            proc = host.run([str(run_nvcc), "--version"], host.env, 30)
            tc.nvcc_text = proc.stdout.strip()
        except OSError as e:
            tc.nvcc_text = f"cannot run {run_nvcc}: {e.strerror}"
        tc.nvcc_version = parse_nvcc_version(tc.nvcc_text)
    return tc


def overlay_plan(tc: Toolchain, host: Host) -> OverlayPlan | None:
    """A CUDA_HOME of symlinks: the toolkit (or pip's tree) plus lib64, libcudart.so, stubs, CCCL, nvcc."""
    src = tc.source_root
    if src is None:
        return None
    pips = host.pip_cuda_roots()
    mirror: dict[str, list[str]] = {"": [str(src)]}
    libs = [d for d in [_lib_dir(src)] + [_lib_dir(r) for r in pips] if d]
    mirror["lib64"] = list(dict.fromkeys(str(d) for d in libs))
    incs = [d for d in [src / "include"] + [r / "include" for r in pips] if d.is_dir()]
    mirror["include"] = list(dict.fromkeys(str(d) for d in incs))
    bins = [d for d in [src / "bin"] + ([tc.nvcc_elsewhere.parent] if tc.nvcc_elsewhere else []) if d.is_dir()]
    if bins:
        mirror["bin"] = list(dict.fromkeys(str(d) for d in bins))
    links: dict[str, str] = {}
    if tc.cudart:
        links["lib64/libcudart.so"] = str(tc.cudart)
    if tc.stub:
        links["lib64/stubs/libcuda.so"] = str(tc.stub)
    if tc.cccl_dir:
        for name in CCCL_NAMES:
            if (tc.cccl_dir / name).exists():
                links[f"include/{name}"] = str(tc.cccl_dir / name)
    nvcc = tc.nvcc or tc.nvcc_elsewhere
    if nvcc:
        links["bin/nvcc"] = str(nvcc)
    return OverlayPlan(mirror=mirror, links=links)
