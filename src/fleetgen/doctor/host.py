"""The machine the doctor looks at, passed in so tests can build a fake one in a temp dir."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from fleetgen.doctor.gpus import NvmlSnapshot, read_nvml

RunFn = Callable[[list[str], Mapping[str, str], float], subprocess.CompletedProcess]
JSON_MARKER = "FLEETGEN_DOCTOR_JSON:"


def _run(cmd: list[str], env: Mapping[str, str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, env=dict(env), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def read_ld_cache() -> dict[str, str]:
    """Sonames the dynamic loader finds without LD_LIBRARY_PATH (`ldconfig -p`)."""
    for exe in ("/sbin/ldconfig", "/usr/sbin/ldconfig", "ldconfig"):
        try:
            out = subprocess.run([exe, "-p"], capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.TimeoutExpired):
            continue
        cache: dict[str, str] = {}
        for m in re.finditer(r"^\s*(\S+) \(([^)]*)\) => (\S+)$", out, re.M):
            if "x86-64" in m.group(2) or "64" in m.group(2) or sys.maxsize <= 2**32:
                cache.setdefault(m.group(1), m.group(3))
        return cache
    return {}


@dataclass
class Host:
    """Environment, interpreter, NVML and loader cache of the machine being diagnosed."""

    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    python: str = sys.executable
    nvml: Callable[[], NvmlSnapshot] = read_nvml
    ld_cache: Callable[[], dict[str, str]] = read_ld_cache
    run: RunFn = _run
    default_cuda_home: Path = Path("/usr/local/cuda")
    # Where drivers put libcuda.so.1 when the loader cache does not list it (containers often).
    driver_lib_dirs: tuple[Path, ...] = tuple(
        Path(d)
        for d in (
            "/usr/lib/x86_64-linux-gnu",
            "/usr/lib64",
            "/usr/local/nvidia/lib64",
            "/usr/lib/wsl/lib",
            "/lib/x86_64-linux-gnu",
        )
    )
    site_packages: list[Path] | None = None  # None: ask `python` where its site-packages are
    timeout_s: float = 180.0

    def which(self, name: str) -> str | None:
        """`which` over this host's PATH, not the doctor's own."""
        return shutil.which(name, path=self.env.get("PATH", ""))

    def python_json(self, script: str, *args: str) -> dict | list:
        """Run `script` in the target interpreter; it prints one JSON line after JSON_MARKER."""
        try:
            proc = self.run([self.python, "-c", script, *args], self.env, self.timeout_s)
        except subprocess.TimeoutExpired:
            return {"probe_error": f"{self.python} did not finish within {self.timeout_s:.0f}s"}
        except OSError as e:
            return {"probe_error": f"cannot run {self.python}: {e.strerror}"}
        for line in reversed(proc.stdout.splitlines()):
            if line.startswith(JSON_MARKER):
                return json.loads(line[len(JSON_MARKER) :])
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        return {"probe_error": f"{self.python} exited with {proc.returncode}: " + " | ".join(tail)}

    def site_package_dirs(self) -> list[Path]:
        if self.site_packages is None:
            got = self.python_json(
                "import json, site, sys; "
                f"sys.stdout.write({JSON_MARKER!r} + json.dumps(site.getsitepackages() + [site.getusersitepackages()]))"
            )
            self.site_packages = [Path(p) for p in got] if isinstance(got, list) else []
        return [p for p in self.site_packages if p.is_dir()]

    def pip_cuda_roots(self) -> list[Path]:
        """pip's CUDA trees: site-packages/nvidia/cu13 (CUDA 13 wheels) or nvidia/cuda_* (CUDA 12 wheels)."""
        roots = []
        for sp in self.site_package_dirs():
            nv = sp / "nvidia"
            if nv.is_dir():
                roots += sorted(
                    d for d in nv.iterdir() if d.is_dir() and any((d / s).is_dir() for s in ("lib", "bin", "include"))
                )
        return roots

    def find_in_pip(self, rel_names: list[str]) -> list[Path]:
        """Files named like `lib/libnvrtc.so.13` under any pip CUDA root, in root order."""
        return [r / n for r in self.pip_cuda_roots() for n in rel_names if (r / n).exists()]
