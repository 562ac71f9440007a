#!/usr/bin/env python3
"""Stage an inference engine's wheels for a GPU machine that has no network.

Why: GPU nodes are often air-gapped, and the device calls we get carry at most 64 MiB each. So the
engine's requirement closure is computed here (where PyPI is reachable) against what the GPU
machine already holds (read from it with `have`), the few very large wheels are pruned to what the
GPU needs, the rest is packed in numbered tar chunks of a given size, and on the GPU machine one
`pip install --no-index --no-deps --target` installs everything. docs/gpu-staging.md has the recipe.

Subcommands:
  have           (on the GPU machine) write its installed distributions, one `name==version` a line
  closure        download the closure of an engine for cp3XX linux x86-64, minus what the target holds
  prune-kernel   rewrite sglang-kernel (and xgrammar) wheels without what one GPU arch does not use
  pack           pack a wheel directory into numbered tar chunks, each at most --chunk-mib
  install        (on the GPU machine) untar the chunks, one pip install of every wheel, print env lines
  env            print the env lines `install` prints, without installing

Only the standard library, plus `packaging` for closure/prune (both the image and the venv have it).
"""

from __future__ import annotations

import argparse
import base64
import csv
import fnmatch
import hashlib
import io
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_HAVE = REPO / "bench" / "gpu" / "h200-image-packages.txt"
DEFAULT_CUDA_HOME = "/usr/local/cuda-13.0"
MIB = 1024 * 1024

# --------------------------------------------------------------------------------------------------
# What is left out, and why. Measured on the H200 test machine (torch 2.11.0+cu130, sm_90) on
# 2026-12-01/02 with a dense Qwen3 served with `--attention-backend flashinfer --grammar-backend none`
# (../shared/gpu notes of that session): sglang imports and serves without each of these.
EXCLUDE: dict[str, str] = {
    "flashinfer-cubin": "361 MB of prebuilt flashinfer kernels; flashinfer JIT-compiles them with nvcc instead "
    "(slow on first use: fleetgen warms the sampling path before work)",
    "tokenspeed-triton": "95 MB; MLA attention kernels, not used by dense models",
    "tokenspeed-mla": "MLA attention (DeepSeek-style models) only",
    "nvidia-cutlass-dsl": "CuTe DSL for FA4/quack kernels (sm100 paths); not imported on sm_90 with flashinfer",
    "nvidia-cutlass-dsl-libs-base": "75 MB; the libraries of nvidia-cutlass-dsl",
    "tilelang": "44 MB; tilelang kernels (some quantised/MLA paths) only",
    "z3-solver": "29 MB; needed by tilelang only",
    "py-spy": "a profiler; not needed to serve",
    "sigstore": "signature checks of model downloads (modelscope); not needed offline",
    "sigstore-models": "sigstore family",
    "sigstore-rekor-types": "sigstore family",
    "rfc3161-client": "sigstore family",
    "rfc8785": "sigstore family",
    "securesystemslib": "sigstore family",
    "tuf": "sigstore family",
    "id": "sigstore family",
    "cryptography": "needed by the sigstore family only",
    "llguidance": "15 MB; a grammar backend; we serve with --grammar-backend none",
    "torchcodec": "video/audio decoding for multimodal models; pulls its own torch build",
    "modelscope": "model hub client; models come from a local path",
    "modelscope-hub": "modelscope's hub client",
    "sgl-deep-gemm": "DeepGEMM FP8 kernels (sm90 FP8 MoE); not used by bf16 dense models",
    "cuda-tile": "CUDA tile kernels for sm100",
    "quack-kernels": "CuTe DSL kernels (sm100)",
    "flash-attn-4": "FA4 (sm100); flashinfer serves attention",
    "kernels": "hub kernels loader; not used",
    "nvidia-cudnn-frontend": "12 MB; cuDNN graph API, only for some attention backends",
}

# Per engine: extra exclusions, pins that override what the image holds, and wheels to prune.
# The pins: sglang pins transformers exactly; with the image's 5.17 `import sglang.launch_server`
# fails (`'qwen3_asr' is already used by a Transformers config`), and that transformers refuses the
# image's tokenizers 0.23.2 (`tokenizers>=0.22.0,<=0.23.0 is required`).
TIMM_KEEP = (
    "sglang pins 1.0.16 (vision towers only); the image's 1.0.29 served 0.5.12 and 0.5.17 on "
    "2026-12-01/02, and swapping it under the image's other users gains nothing"
)
PROFILES: dict[str, dict] = {
    "sglang==0.5.12": {
        "exclude": {
            "xgrammar": "45 MB; a grammar backend; 0.5.12 imports it lazily and we serve with --grammar-backend none"
        },
        "pins": ["transformers==5.6.0", "tokenizers==0.22.2"],
        "keep": {"timm": TIMM_KEEP},
    },
    "sglang==0.5.17": {
        "exclude": {
            "helion": "a kernel DSL; 0.5.17 logs its absence and serves",
            "humming-kernels": "optional kernels; 0.5.17 logs their absence and serves",
            "nvidia-mathdx": "cuBLASDx/cuFFTDx headers for optional kernels; not used",
        },
        # xgrammar is NOT excluded here: 0.5.17 imports it at module level
        # (`from xgrammar import StructuralTag` in function_call/inkling_detector.py); its 65 MB
        # static library is pruned (PRUNE below).
        "pins": ["transformers==5.12.1", "tokenizers==0.22.2"],
        "keep": {
            "timm": TIMM_KEEP,
            "numba": "sglang pins 0.65.1, which needs llvmlite 0.47; the image's llvmlite is its numba 0.68.0's, "
            "and 0.5.17 served with the image's numba on 2026-12-02",
        },
    },
}

# Files dropped from wheels that are far larger than what serving on one arch needs.
# {arch}: the target GPU's arch ("sm90"); patterns match paths inside the wheel.
PRUNE: dict[str, dict] = {
    "sglang-kernel": {
        "why": "300+ MiB wheel: kernels for every arch, FA3 (1.08 GB unpacked), FlashMLA and static libraries",
        "drop": ["sgl_kernel/sm100/*", "sgl_kernel/flash_ops*", "sgl_kernel/flashmla_ops*", "*lib/*_static.a"],
        "drop_other_arches": True,
    },
    "xgrammar": {
        "why": "its static library (65 MB) is only for linking C++ users against it",
        "drop": ["*.a"],
        "drop_other_arches": False,
    },
}
ARCH_DIR = re.compile(r"(^|/)sm(\d+)[a-z]?/")

PLATFORMS = [
    "manylinux_2_34_x86_64",
    "manylinux_2_31_x86_64",
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux_2_5_x86_64",
    "manylinux1_x86_64",
    "linux_x86_64",
]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def die(msg: str) -> None:
    log(f"gpu_stage: error: {msg}")
    raise SystemExit(2)


# ------------------------------------------------------------------------------------------- have
def installed_distributions(paths: list[str] | None = None) -> list[str]:
    """`name==version` of every distribution importlib.metadata sees (on `paths`, else sys.path)."""
    from importlib import metadata

    out = {}
    for d in metadata.distributions(path=paths) if paths else metadata.distributions():
        name = d.metadata.get("Name")
        if name:
            out.setdefault(normalize(name), f"{normalize(name)}=={d.version}")
    return sorted(out.values())


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_have(path: Path) -> dict[str, str | None]:
    """Parse a have-list: `name==version` lines (what `have` writes), or bare names, one a line or
    comma-separated (the older hand-written list). A bare name means held at an unknown version,
    taken to satisfy any requirement (pin it to stage a specific one)."""
    if not path.is_file():
        die(
            f"--have {path}: no such file; write one on the GPU machine with `python3 scripts/gpu_stage.py have --out "
            "FILE`"
        )
    have: dict[str, str | None] = {}
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        for item in filter(None, (x.strip().rstrip(".") for x in line.split(","))):
            name, sep, ver = item.partition("==")
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name.strip()) or (sep and not ver.strip()):
                die(f"--have {path}: line {n}: {item!r} is not `name` or `name==version`")
            have[normalize(name)] = ver.strip() or None
    return have


# ---------------------------------------------------------------------------------------- closure
def target_env(python: str) -> dict[str, str]:
    """PEP 508 marker environment of a CPython on linux x86-64."""
    parts = python.split(".")
    if len(parts) < 2 or not all(p.isdigit() for p in parts):
        die(f"--python {python!r}: give a version like 3.12 or 3.12.3")
    full = python if len(parts) >= 3 else f"{python}.0"
    return {
        "python_version": ".".join(parts[:2]),
        "python_full_version": full,
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": "x86_64",
        "os_name": "posix",
        "implementation_name": "cpython",
        "implementation_version": full,
        "platform_python_implementation": "CPython",
        "platform_release": "",
        "platform_version": "",
        "extra": "",
    }


@dataclass
class Decision:
    action: str  # "skip-marker" | "excluded" | "held" | "stage"
    spec: str = ""  # what to download, for "stage"
    why: str = ""


def decide(
    req_text: str,
    env: dict,
    have: dict[str, str | None],
    exclude: dict[str, str],
    pins: dict[str, str],
    keep: dict[str, str] | None = None,
) -> Decision:
    """What to do with one requirement line: skip it (its marker is false on the target, extras
    included), leave it out (the exclusion list), take it as held (the target's version satisfies
    the spec, or its version is unknown, or `keep` names it: the held version is known to work), or
    stage it (absent, or held at a version the spec refuses; pins override both the spec and what
    is held)."""
    from packaging.requirements import Requirement
    from packaging.version import InvalidVersion, Version

    req = Requirement(req_text)
    name = normalize(req.name)
    if req.marker is not None and not req.marker.evaluate(env):
        return Decision("skip-marker", why=str(req.marker))
    if name in exclude:
        return Decision("excluded", why=exclude[name])
    spec = req.specifier
    if name in pins:
        spec = Requirement(pins[name]).specifier
    held = have.get(name, "absent")
    if held is None:
        if name in pins:
            return Decision("stage", f"{name}{spec}", "pinned; the target's version is unknown")
        return Decision("held", why="held (version unknown)")
    if held != "absent":
        try:
            ok = spec.contains(Version(held), prereleases=True)
        except InvalidVersion:
            ok = False
        if ok:
            return Decision("held", why=f"held {held}")
        if keep and name in keep and name not in pins:
            return Decision("held", why=f"held {held} kept although {spec} refuses it: {keep[name]}")
        return Decision("stage", f"{name}{spec}", f"target holds {held}, {spec} refuses it")
    return Decision("stage", f"{name}{spec}", "pinned" if name in pins else "absent on the target")


def wheel_requirements(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA"))
        text = z.read(meta).decode("utf-8", "replace")
    head = text.split("\n\n", 1)[0]
    return [line.split(":", 1)[1].strip() for line in head.splitlines() if line.startswith("Requires-Dist:")]


def wheel_name_version(wheel: Path) -> tuple[str, str]:
    from packaging.utils import parse_wheel_filename

    name, ver, _, _ = parse_wheel_filename(wheel.name)
    return normalize(name), str(ver)


class PipFetcher:
    """Downloads one wheel per spec with `pip download --no-deps --only-binary=:all:` for the
    target interpreter and platform; reuses a wheel already in `dest` that satisfies the spec."""

    def __init__(self, dest: Path, python: str, index_url: str | None = None):
        self.dest, self.python, self.index_url = dest, ".".join(python.split(".")[:2]), index_url
        dest.mkdir(parents=True, exist_ok=True)

    def _local(self, spec: str) -> Path | None:
        from packaging.requirements import Requirement
        from packaging.version import Version

        req = Requirement(spec)
        for w in sorted(self.dest.glob("*.whl")):
            n, v = wheel_name_version(w)
            if n == normalize(req.name) and req.specifier.contains(Version(v), prereleases=True):
                return w
        return None

    def __call__(self, spec: str) -> Path:
        hit = self._local(spec)
        if hit:
            return hit
        pyver = self.python.replace(".", "")
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--disable-pip-version-check",
            "--no-deps",
            "--only-binary=:all:",
            "--python-version",
            self.python,
            "--implementation",
            "cp",
            "--abi",
            f"cp{pyver}",
            "--abi",
            "abi3",
            "--abi",
            "none",
            "-d",
            str(self.dest),
        ]
        for p in PLATFORMS:
            cmd += ["--platform", p]
        cmd += ["--platform", "any"]
        if self.index_url:
            cmd += ["--index-url", self.index_url]
        r = subprocess.run(cmd + [spec], capture_output=True, text=True)
        hit = self._local(spec)
        if r.returncode or not hit:
            raise RuntimeError(f"pip download {spec!r} failed: {(r.stderr or r.stdout).strip()[-600:]}")
        return hit


@dataclass
class Closure:
    staged: dict[str, Path] = field(default_factory=dict)  # name -> wheel
    why: dict[str, str] = field(default_factory=dict)  # name -> why staged
    held: dict[str, str] = field(default_factory=dict)
    excluded: dict[str, str] = field(default_factory=dict)  # name -> reason (only those some package asked for)
    conflicts: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)


def resolve(
    roots: list[str],
    env: dict,
    have: dict,
    exclude: dict,
    pins: dict[str, str],
    fetch,
    keep: dict[str, str] | None = None,
) -> Closure:
    """Breadth-first over Requires-Dist from `roots`. The first staged version of a name wins; a
    later requirement it does not satisfy is reported as a conflict. A name held by the target is
    re-checked against each later requirement, and staged when one refuses the held version."""
    from packaging.requirements import Requirement
    from packaging.version import Version

    out = Closure()
    queue = list(roots) + [p for p in pins.values()]
    while queue:
        text = queue.pop(0)
        req = Requirement(text)
        name = normalize(req.name)
        if req.marker is not None and not req.marker.evaluate(env):
            continue  # an extra's requirement, or another platform's / Python's
        if name in out.staged:
            v = wheel_name_version(out.staged[name])[1]
            if name not in pins and not req.specifier.contains(Version(v), prereleases=True):
                out.conflicts.append(f"{name} {v} staged, but a requirement asks {text}")
            continue
        if name in out.failed:
            continue
        d = decide(text, env, have, exclude, pins, keep)
        if d.action == "skip-marker":
            continue
        if d.action == "excluded":
            out.excluded[name] = d.why
            continue
        if d.action == "held":
            out.held.setdefault(name, d.why)
            continue
        try:
            wheel = fetch(d.spec)
        except RuntimeError as e:
            out.failed[name] = str(e)
            continue
        out.held.pop(name, None)
        out.staged[name], out.why[name] = wheel, d.why
        log(f"  + {wheel.name} ({d.why})")
        queue += wheel_requirements(wheel)
    return out


def profile_for(engine: list[str]) -> dict:
    for e in engine:
        key = e.replace(" ", "").lower()
        if key in PROFILES:
            return PROFILES[key]
    return {"exclude": {}, "pins": []}


def size_table(paths: list[Path]) -> str:
    rows = sorted(((p.stat().st_size, p.name) for p in paths), reverse=True)
    lines = ["|      MiB | wheel |", "|---------:|---|"]
    lines += [f"| {s / MIB:8.1f} | {n} |" for s, n in rows]
    lines.append(f"| {sum(s for s, _ in rows) / MIB:8.1f} | total, {len(rows)} files |")
    return "\n".join(lines)


def project_dependencies(pyproject: Path) -> list[str]:
    """[project].dependencies of a pyproject.toml: the tool's own runtime deps, staged beside the engine's."""
    import tomllib

    try:
        return list(tomllib.loads(pyproject.read_text())["project"]["dependencies"])
    except (OSError, KeyError, tomllib.TOMLDecodeError) as e:
        die(f"--also-project {pyproject}: cannot read [project].dependencies ({e})")


def cmd_closure(a) -> int:
    from packaging.requirements import Requirement

    have = read_have(Path(a.have))
    prof = profile_for(a.engine)
    exclude = {**EXCLUDE, **prof["exclude"]}
    for x in a.include:
        exclude.pop(normalize(x), None)
    for x in a.exclude:
        exclude[normalize(x)] = "excluded with --exclude"
    pins = {}
    for p in prof["pins"] + a.pin:
        try:
            pins[normalize(Requirement(p).name)] = p
        except Exception:
            die(f"--pin {p!r}: not a requirement like name==1.2.3")
    if a.also_project:
        a.also += project_dependencies(Path(a.also_project))
    for e in a.engine + a.also:
        try:
            Requirement(e)
        except Exception:
            die(f"--engine/--also {e!r}: not a requirement like sglang==0.5.12")
    out = Path(a.out)
    fetch = PipFetcher(out, a.python, a.index_url)
    log(
        f"closure of {' '.join(a.engine + a.also)} for cp{a.python} linux x86-64 against {a.have} "
        f"({len(have)} held); pins {sorted(pins.values())}"
    )
    keep = {**prof.get("keep", {}), **{normalize(x): "kept with --keep" for x in a.keep}}
    c = resolve(a.engine + a.also, target_env(a.python), have, exclude, pins, fetch, keep)
    # Wheels in DIR that the closure no longer names (an earlier run's) would be packed: move them aside.
    keep = set(c.staged.values())
    for w in out.glob("*.whl"):
        if w not in keep:
            (out / "unused").mkdir(exist_ok=True)
            shutil.move(str(w), out / "unused" / w.name)
            log(f"  moved aside (not in this closure): {w.name}")
    print(size_table(list(c.staged.values())))
    print(f"\nleft out ({len(c.excluded)}):")
    for n, why in sorted(c.excluded.items()):
        print(f"  {n}: {why}")
    report = {
        "engine": a.engine,
        "also": a.also,
        "python": a.python,
        "have": str(a.have),
        "pins": sorted(pins.values()),
        "staged": {
            n: {"wheel": w.name, "bytes": w.stat().st_size, "why": c.why[n]} for n, w in sorted(c.staged.items())
        },
        "excluded": c.excluded,
        "conflicts": c.conflicts,
        "failed": c.failed,
    }
    (out / "closure.json").write_text(json.dumps(report, indent=1) + "\n")
    for x in c.conflicts:
        print(f"conflict: {x}")
    for n, e in c.failed.items():
        print(f"FAILED {n}: {e}")
    return 1 if c.failed else 0


# ------------------------------------------------------------------------------------------ prune
def record_line(name: str, data: bytes) -> list[str]:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return [name, f"sha256={digest}", str(len(data))]


def prune_wheel(wheel: Path, out_dir: Path, drop: list[str], keep_arch: str | None = None) -> tuple[Path, list[str]]:
    """Write `wheel` again into `out_dir` (same file name) without the members matching `drop`
    (fnmatch on the path in the wheel) and, with `keep_arch` ("sm90"), without any `smNN/` directory
    of another arch. RECORD is rewritten to list exactly what remains, so pip installs it as usual."""
    out_dir.mkdir(parents=True, exist_ok=True)
    dest = out_dir / wheel.name
    if dest.resolve() == wheel.resolve():
        die(f"prune: {wheel} would overwrite itself; give another --out")
    keep_num = re.fullmatch(r"sm(\d+)[a-z]?", keep_arch).group(1) if keep_arch else None
    dropped: list[str] = []
    with zipfile.ZipFile(wheel) as zin:
        record = next(n for n in zin.namelist() if n.count("/") == 1 and n.endswith(".dist-info/RECORD"))
        rows = []
        with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as zout:
            for info in zin.infolist():
                n = info.filename
                if n == record:
                    continue
                m = ARCH_DIR.search(n)
                if any(fnmatch.fnmatch(n, p) for p in drop) or (keep_num and m and m.group(2) != keep_num):
                    dropped.append(n)
                    continue
                data = zin.read(info)
                zout.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)
                if not n.endswith("/"):
                    rows.append(record_line(n, data))
            buf = io.StringIO()
            w = csv.writer(buf, lineterminator="\n")
            w.writerows(rows + [[record, "", ""]])
            zout.writestr(record, buf.getvalue())
    return dest, dropped


def cmd_prune(a) -> int:
    d = Path(a.dir)
    orig = d / "unpruned"
    done = 0
    for w in sorted(list(d.glob("*.whl")) + list(orig.glob("*.whl"))):
        name, _ = wheel_name_version(w)
        rule = PRUNE.get(name)
        if not rule or (w.parent == d and (orig / w.name).exists()):
            continue
        src = w
        if w.parent == d:  # first run: keep the original aside so a second run prunes from it again
            orig.mkdir(exist_ok=True)
            src = Path(shutil.move(str(w), orig / w.name))
        tmp = d / ".prune-tmp"
        pruned, dropped = prune_wheel(src, tmp, rule["drop"], a.arch if rule["drop_other_arches"] else None)
        shutil.move(str(pruned), d / pruned.name)
        tmp.rmdir()
        log(
            f"{src.name}: {src.stat().st_size / MIB:.1f} MiB -> {(d / pruned.name).stat().st_size / MIB:.1f} MiB, "
            f"{len(dropped)} files dropped ({rule['why']})"
        )
        done += 1
    if not done:
        log(f"prune: no wheel of {sorted(PRUNE)} in {d}")
    return 0


# ------------------------------------------------------------------------------------------- pack
def cmd_pack(a) -> int:
    src, out = Path(a.src), Path(a.out)
    limit = int(a.chunk_mib * MIB)
    files = sorted(src.glob("*.whl")) + [Path(x) for x in a.extra]
    if not files:
        die(f"pack: no wheels in {src}")
    # a tar member costs its data padded to 512, a 512-byte header, and (pax, for wheel names over
    # 100 characters) up to 2 x 512 more; the archive ends with 2 x 512 and blocking to 10240
    cost = {f: 1536 + (f.stat().st_size + 511) // 512 * 512 for f in files}
    overhead = 10240
    too_big = [f for f in files if cost[f] + overhead > limit]
    if too_big:
        die(
            f"pack: {', '.join(f.name for f in too_big)} larger than --chunk-mib {a.chunk_mib}; prune it "
            f"(prune-kernel) or exclude it"
        )
    bins: list[list[Path]] = []
    for f in sorted(files, key=lambda f: -cost[f]):  # first fit decreasing
        for b in bins:
            if sum(cost[x] for x in b) + cost[f] + overhead <= limit:
                b.append(f)
                break
        else:
            bins.append([f])
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("chunk-*.tar"):
        old.unlink()
    lines = []
    for i, b in enumerate(bins, 1):
        path = out / f"chunk-{i:02d}-of-{len(bins):02d}.tar"
        with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as t:
            for f in sorted(b):
                t.add(f, arcname=f"wheels/{f.name}", filter=_anonymous)
        size = path.stat().st_size
        if size > limit:
            die(f"pack: {path} is {size} bytes, over the limit {limit}")
        lines.append(f"{path.name}\t{size}\t{size / MIB:.1f} MiB\t{len(b)} wheels")
    (out / "MANIFEST.txt").write_text(
        f"# {len(bins)} chunks, each <= {a.chunk_mib} MiB; install with: python3 scripts/gpu_stage.py install --from "
        "DIR\n" + "\n".join(lines) + "\n"
    )
    print("\n".join(lines))
    return 0


def _anonymous(ti: tarfile.TarInfo) -> tarfile.TarInfo:
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    ti.mode = 0o644
    return ti


# ---------------------------------------------------------------------------------------- install
def env_lines(target: Path, cuda_home: str) -> list[str]:
    return [
        f"export PYTHONPATH={target}${{PYTHONPATH:+:$PYTHONPATH}}",
        f"export PATH={target}/bin:{cuda_home}/bin:$PATH",
        f"export CUDA_HOME={cuda_home}",
    ]


def cmd_install(a) -> int:
    src, target = Path(a.src), Path(a.target)
    chunks = sorted(src.glob("chunk-*-of-*.tar"))
    if not chunks:
        die(f"install: no chunk-NN-of-MM.tar in {src}")
    total = int(re.search(r"-of-(\d+)\.tar$", chunks[0].name).group(1))
    names = {c.name for c in chunks}
    missing = [
        f"chunk-{i:02d}-of-{total:02d}.tar"
        for i in range(1, total + 1)
        if f"chunk-{i:02d}-of-{total:02d}.tar" not in names
    ]
    if missing:
        die(f"install: {src} lacks {', '.join(missing)}; carry every chunk of the stage")
    work = Path(tempfile.mkdtemp(prefix="gpu-stage-", dir=a.tmp))
    try:
        for c in chunks:
            with tarfile.open(c) as t:
                t.extractall(work, filter="data") if hasattr(tarfile, "data_filter") else t.extractall(work)
        wheels = sorted((work / "wheels").glob("*.whl")) + [Path(x) for x in a.extra]
        for x in a.extra:
            if not Path(x).is_file():
                die(f"install: --extra {x}: no such file")
        target.mkdir(parents=True, exist_ok=True)
        if any(target.iterdir()) and not a.force:
            die(
                f"install: {target} is not empty: a second `pip install --target` into it skips bin/ and "
                f"existing packages; give an empty --target, or --force to upgrade in place"
            )
        # ONE pip command: a second `pip --target` into the same dir skips its bin/, so every wheel
        # (the fleetgen wheel too, --extra) goes in this one.
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "--no-index",
            "--no-deps",
            "--no-compile",
            "--no-cache-dir",
            "--target",
            str(target),
        ]
        if a.force:
            cmd.append("--upgrade")
        log(f"pip install of {len(wheels)} wheels into {target}")
        # pip's output goes to stderr: stdout carries only the env lines, for `eval "$(... install ...)"`
        r = subprocess.run(cmd + [str(w) for w in wheels], capture_output=True, text=True)
        sys.stderr.write(r.stdout + r.stderr)
        if r.returncode:
            die(f"install: pip failed with rc {r.returncode}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    log("installed; the environment (eval these lines):")
    print("\n".join(env_lines(target, a.cuda_home)))
    return 0


def cmd_env(a) -> int:
    print("\n".join(env_lines(Path(a.target), a.cuda_home)))
    return 0


def cmd_have(a) -> int:
    lines = installed_distributions(a.path or None)
    text = (
        f"# {len(lines)} distributions on {sys.executable} (python {sys.version.split()[0]})\n"
        + "\n".join(lines)
        + "\n"
    )
    if a.out:
        Path(a.out).write_text(text)
        log(f"wrote {len(lines)} distributions to {a.out}")
    else:
        sys.stdout.write(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="gpu_stage.py", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("have", help="(on the GPU machine) list installed distributions as name==version")
    s.add_argument("--out", help="file to write (default stdout)")
    s.add_argument("--path", action="append", default=[], help="search these dirs instead of sys.path (repeatable)")
    s.set_defaults(fn=cmd_have)

    s = sub.add_parser("closure", help="download the engine's wheel closure minus what the target holds")
    s.add_argument(
        "--engine", action="append", required=True, help="root requirement, e.g. sglang==0.5.12 (repeatable)"
    )
    s.add_argument("--also", action="append", default=[], help="more root requirements (e.g. fleetgen's own deps)")
    s.add_argument("--also-project", help="a pyproject.toml whose [project].dependencies are roots too (fleetgen's)")
    s.add_argument(
        "--have", default=str(DEFAULT_HAVE), help="the target's have-list (default: the H200 image's, bench/gpu/)"
    )
    s.add_argument("--python", default="3.12", help="the target's Python (default 3.12)")
    s.add_argument(
        "--out", required=True, help="directory for the wheels (reused: wheels already there are not downloaded again)"
    )
    s.add_argument("--pin", action="append", default=[], help="override: stage exactly this (e.g. tokenizers==0.22.2)")
    s.add_argument("--exclude", action="append", default=[], help="leave this name out too")
    s.add_argument(
        "--keep", action="append", default=[], help="use the target's version of this name even where a spec refuses it"
    )
    s.add_argument("--include", action="append", default=[], help="stage this name although the exclusion list has it")
    s.add_argument("--index-url", help="pip's index URL (default pip's)")
    s.set_defaults(fn=cmd_closure)

    for name in ("prune-kernel", "prune"):
        s = sub.add_parser(name, help="prune sglang-kernel (and xgrammar) wheels in a closure dir to one GPU arch")
        s.add_argument("--dir", required=True, help="the closure's directory; originals are kept in DIR/unpruned/")
        s.add_argument("--arch", default="sm90", help="the GPU's arch dir to keep (sm90 for H100/H200)")
        s.set_defaults(fn=cmd_prune)

    s = sub.add_parser("pack", help="pack DIR/*.whl into numbered tar chunks")
    s.add_argument("--from", dest="src", required=True, help="directory of wheels")
    s.add_argument("--out", required=True, help="directory for chunk-NN-of-MM.tar and MANIFEST.txt")
    s.add_argument(
        "--chunk-mib",
        type=float,
        default=58,
        help="largest chunk, MiB (default 58: a device call carries 64 MiB with the repo)",
    )
    s.add_argument("--extra", action="append", default=[], help="another wheel to pack (repeatable)")
    s.set_defaults(fn=cmd_pack)

    s = sub.add_parser(
        "install", help="(on the GPU machine) untar the chunks and pip-install every wheel in one command"
    )
    s.add_argument("--from", dest="src", required=True, help="directory holding chunk-NN-of-MM.tar")
    s.add_argument("--target", default="/tmp/site", help="pip --target directory (default /tmp/site)")
    s.add_argument(
        "--extra", action="append", default=[], help="another wheel for the same pip command, e.g. fleetgen's"
    )
    s.add_argument("--cuda-home", default=DEFAULT_CUDA_HOME, help=f"CUDA_HOME to print (default {DEFAULT_CUDA_HOME})")
    s.add_argument("--tmp", default=None, help="where to untar the chunks (default the system temp dir)")
    s.add_argument("--force", action="store_true", help="install into a non-empty --target (pip --upgrade)")
    s.set_defaults(fn=cmd_install)

    s = sub.add_parser("env", help="print the env lines for an installed --target")
    s.add_argument("--target", default="/tmp/site")
    s.add_argument("--cuda-home", default=DEFAULT_CUDA_HOME)
    s.set_defaults(fn=cmd_env)

    a = p.parse_args(argv)
    return a.fn(a)


if __name__ == "__main__":
    sys.exit(main())
