"""Fake machines on disk, built from what a real H200 showed (fixtures/): the doctor's seam for tests.

Each fake is real files: a pip `nvidia/cu13` tree, a CUDA_HOME, fake `torch` / `sgl_kernel` packages that a real
subprocess imports, nvcc scripts printing real `nvcc --version` text, and a real shared object standing in for
libnvrtc so the real dynamic loader produces the real error message.
"""

from __future__ import annotations

import _ctypes
import json
import shutil
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from fleetgen.doctor import DoctorConfig, DoctorReport, Host, env_for_replicas, run_doctor, write_fix
from fleetgen.doctor.gpus import NvmlSnapshot
from fleetgen.gpu_info import GpuInfo

FIXTURES = Path(__file__).parent / "fixtures"
REAL_SO = Path(_ctypes.__file__)  # any real ELF shared object will do as a stand-in library


def fixture_lines(name: str) -> list[str]:
    return [line for line in (FIXTURES / name).read_text().splitlines() if line.strip()]


def h200_nvml() -> NvmlSnapshot:
    got = json.loads((FIXTURES / "nvml.json").read_text())
    g = got["gpus"][0]
    return NvmlSnapshot(
        gpus=[
            GpuInfo(index=g["index"], name=g["name"], memory_total=g["memory_total"], compute_capability=tuple(g["cc"]))
        ],
        driver_version=got["driver"],
        cuda_driver=(got["cuda_driver"] // 1000, got["cuda_driver"] % 1000 // 10),
    )


def sm120_nvml(count: int = 2) -> NvmlSnapshot:
    """The seed's machine: consumer/workstation Blackwell, compute capability 12.0."""
    return NvmlSnapshot(
        gpus=[
            GpuInfo(
                index=i,
                name="NVIDIA RTX PRO 6000 Blackwell Server Edition",
                memory_total=97_887_092_736,
                compute_capability=(12, 0),
            )
            for i in range(count)
        ],
        driver_version="580.95.05",
        cuda_driver=(13, 0),
    )


def nvcc_script(path: Path, release: str = "13.0") -> Path:
    """An nvcc that prints the real H200 `nvcc --version` text (release number swapped for other versions)."""
    text = (FIXTURES / "nvcc-version-13.0.txt").read_text()
    if release != "13.0":
        text = text.replace("release 13.0, V13.0.88", f"release {release}, V{release}.131").replace(
            "cuda_13.0", f"cuda_{release}"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\ncat <<'EOF'\n{text}EOF\n")
    path.chmod(0o755)
    return path


@dataclass
class FakeMachine:
    root: Path
    nvml: NvmlSnapshot
    env: dict[str, str] = field(default_factory=dict)
    default_cuda_home: Path | None = None

    @property
    def sp(self) -> Path:
        return self.root / "site-packages"

    @property
    def cu13(self) -> Path:
        return self.sp / "nvidia" / "cu13"

    @property
    def pymods(self) -> Path:
        return self.root / "pymods"

    def host(self, env: dict[str, str] | None = None) -> Host:
        return Host(
            env=env if env is not None else self.env,
            python=str(self.root / "venv-bin" / "python"),
            nvml=lambda: self.nvml,
            ld_cache=lambda: {},
            default_cuda_home=self.default_cuda_home or self.root / "no-usr-local-cuda",
            site_packages=[self.sp],
            driver_lib_dirs=(self.root / "driver",),
            timeout_s=60,
        )

    def doctor(self, env: dict[str, str] | None = None, **cfg) -> DoctorReport:
        return run_doctor(DoctorConfig(**cfg), self.host(env))

    def fix_and_recheck(self, report: DoctorReport, **cfg) -> tuple[DoctorReport, Path]:
        """Write the fix, apply exactly what `up` would (env_for_replicas), and run the doctor again."""
        fix_dir = self.root / "fix"
        write_fix(report, fix_dir, env=self.env)
        env = {**self.env, **env_for_replicas(fix_dir, self.env)}
        return self.doctor(env, **cfg), fix_dir

    # --- pieces of a machine -------------------------------------------------------------
    def pip_cuda_tree(self) -> None:
        """The real H200's site-packages/nvidia/cu13: lib/ with versioned sonames only, include/ without nv/target."""
        for rel in fixture_lines("site-packages-nvidia-tree.txt"):
            if rel.startswith("./cu13/lib/"):
                p = self.sp / "nvidia" / rel[2:]
                p.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(REAL_SO, p)
        inc = self.cu13 / "include"
        inc.mkdir(parents=True, exist_ok=True)
        for name in fixture_lines("ls-pip-cu13-include.txt"):
            (inc / name).touch() if "." in name else (inc / name).mkdir(exist_ok=True)

    def driver(self) -> None:
        (self.root / "driver").mkdir(exist_ok=True)
        shutil.copyfile(REAL_SO, self.root / "driver" / "libcuda.so.1")

    def system_toolkit(self, path: Path, release: str = "13.0") -> Path:
        """A CUDA toolkit laid out like the H200's /usr/local/cuda (file names from its real listing)."""
        lib = path / "lib64"
        (lib / "stubs").mkdir(parents=True)
        for line in fixture_lines("ls-cuda-lib64.txt"):
            parts = line.split()
            if len(parts) >= 9 and parts[0][0] in "-l" and parts[8].startswith("lib"):
                (lib / parts[8]).touch()
        for line in fixture_lines("ls-cuda-lib64-stubs.txt"):
            parts = line.split()
            if len(parts) >= 9 and parts[8].startswith("lib"):
                (lib / "stubs" / parts[8]).touch()
        inc = path / "include"
        inc.mkdir()
        for name in fixture_lines("ls-cuda-include.txt"):
            (inc / name).touch() if "." in name else (inc / name).mkdir(exist_ok=True)
        for name in fixture_lines("ls-cuda-include-cccl.txt"):
            (inc / "cccl" / name).mkdir(parents=True, exist_ok=True)
        (inc / "cccl" / "nv" / "target").touch()
        if (inc / "nv").is_dir():
            (inc / "nv" / "target").touch()
        nvcc_script(path / "bin" / "nvcc", release)
        return path

    def fake_torch(
        self,
        version: str = "2.11.0+cu130",
        cuda: str | None = "13.0",
        arch_list: tuple[str, ...] = ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"),
    ) -> None:
        """A `torch` the subprocess imports, answering like the real one did on the H200 (fixtures/torch.json)."""
        caps = [list(g.compute_capability) for g in self.nvml.gpus] if cuda else []
        pkg = self.pymods / "torch"
        (pkg / "version").mkdir(parents=True, exist_ok=True)
        (pkg / "__init__.py").write_text(
            textwrap.dedent(f"""
            __version__ = {version!r}
            from torch import version, cuda
        """)
        )
        (pkg / "version" / "__init__.py").write_text(f"cuda = {cuda!r}\n")
        (pkg / "cuda.py").write_text(
            textwrap.dedent(f"""
            _caps = {caps!r}
            def is_available(): return bool(_caps)
            def device_count(): return len(_caps)
            def get_device_capability(i): return tuple(_caps[i])
            def get_arch_list(): return {list(arch_list)!r}
        """)
        )
        self.dist_info("torch", version.split("+")[0])

    def dist_info(self, name: str, version: str, requires: tuple[str, ...] = ()) -> None:
        d = self.pymods / f"{name.replace('-', '_')}-{version}.dist-info"
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        meta = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"] + [
            f"Requires-Dist: {r}" for r in requires
        ]
        (d / "METADATA").write_text("\n".join(meta) + "\n")
        for old in self.pymods.glob(f"{name.replace('-', '_')}-*.dist-info"):
            if old != d:
                shutil.rmtree(old)

    def sgl_kernel(self, body: str, arch_dirs: tuple[str, ...] = ("sm90", "sm100")) -> None:
        pkg = self.pymods / "sgl_kernel"
        shutil.rmtree(pkg, ignore_errors=True)
        pkg.mkdir(parents=True)
        for a in arch_dirs:
            (pkg / a).mkdir()
        (pkg / "__init__.py").write_text(textwrap.dedent(body))
