"""scripts/gpu_stage.py on CPU, with no network: the closure's marker/version logic, the kernel
prune (RECORD rewritten, pip still installs it), packing into chunks and the one-command install.

Wheels are tiny synthetic ones built in tmp_path; the closure walks them through a fetcher that
hands out those files where the real one calls `pip download` (a stand-in for PyPI)."""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib.util
import io
import random
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_stage.py"
spec = importlib.util.spec_from_file_location("gpu_stage", SCRIPT)
gs = importlib.util.module_from_spec(spec)
sys.modules["gpu_stage"] = gs
spec.loader.exec_module(gs)

ENV = gs.target_env("3.12")


def make_wheel(dirpath: Path, name: str, version: str, requires=(), files=None) -> Path:
    """A valid py3-none-any wheel: METADATA with Requires-Dist, WHEEL, RECORD with real hashes."""
    dist = f"{name.replace('-', '_')}-{version}"
    files = dict(files or {f"{name.replace('-', '_')}/__init__.py": b"X = 1\n"})
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires
    )
    files[f"{dist}.dist-info/METADATA"] = meta.encode() + b"\nlong description\nRequires-Dist: not-a-header\n"
    files[f"{dist}.dist-info/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    rows = [gs.record_line(n, d) for n, d in files.items()] + [[f"{dist}.dist-info/RECORD", "", ""]]
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    files[f"{dist}.dist-info/RECORD"] = buf.getvalue().encode()
    dirpath.mkdir(parents=True, exist_ok=True)
    path = dirpath / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for n, d in files.items():
            z.writestr(n, d)
    return path


# ---------------------------------------------------------------------------------- decide
@pytest.mark.parametrize(
    "req",
    [
        'foo>=1; python_version < "3.11"',
        'foo; sys_platform == "darwin"',
        'foo; platform_machine == "aarch64"',
        'foo; extra == "dev"',
        'foo; python_version >= "3.10" and extra == "all"',
    ],
)
def test_requirements_whose_marker_is_false_on_the_target_are_skipped(req):
    assert gs.decide(req, ENV, {}, {}, {}).action == "skip-marker"


def test_markers_true_on_cp312_linux_are_followed():
    d = gs.decide('foo>=1; python_version >= "3.12" and sys_platform == "linux"', ENV, {}, {}, {})
    assert (d.action, d.spec) == ("stage", "foo>=1")
    # the same line for a 3.11 target is skipped: the marker is evaluated for --python, not this interpreter
    assert gs.decide('foo; python_version >= "3.12"', gs.target_env("3.11"), {}, {}, {}).action == "skip-marker"


def test_held_versions_are_checked_against_the_spec():
    have = {"torch": "2.11.0+cu130", "tokenizers": "0.23.2", "numpy": None}
    assert gs.decide("torch==2.11.0", ENV, have, {}, {}).action == "held"  # a local version satisfies ==public
    d = gs.decide("tokenizers<=0.23.0,>=0.22.0", ENV, have, {}, {})
    assert d.action == "stage" and "0.23.2" in d.why
    assert gs.decide("numpy>=99", ENV, have, {}, {}).action == "held"  # version unknown: taken as held
    assert gs.decide("Torch_Memory.Saver", ENV, {}, {}, {}).spec == "torch-memory-saver"  # names normalised


def test_pins_override_spec_and_held_and_keep_keeps_the_held_version():
    have = {"transformers": None, "tokenizers": "0.22.2", "numba": "0.68.0"}
    pins = {"transformers": "transformers==5.6.0", "tokenizers": "tokenizers==0.22.2"}
    d = gs.decide("transformers>=4", ENV, have, {}, pins)
    assert (d.action, d.spec) == ("stage", "transformers==5.6.0")
    assert gs.decide("tokenizers>=0.23", ENV, have, {}, pins).action == "held"  # the pin is what is held
    assert gs.decide("numba==0.65.1", ENV, have, {}, {}).action == "stage"
    assert gs.decide("numba==0.65.1", ENV, have, {}, {}, keep={"numba": "works"}).action == "held"


def test_excluded_names_are_left_out_with_their_reason():
    d = gs.decide("flashinfer_cubin==0.6", ENV, {}, gs.EXCLUDE, {})
    assert d.action == "excluded" and "JIT" in d.why
    assert "xgrammar" in gs.PROFILES["sglang==0.5.12"]["exclude"]
    assert "xgrammar" not in gs.PROFILES["sglang==0.5.17"]["exclude"]  # 0.5.17 imports it at module level


# --------------------------------------------------------------------------------- resolve
class FakeIndex:
    """Stands in for `pip download`: returns the newest synthetic wheel matching a spec."""

    def __init__(self, wheels: list[Path]):
        self.wheels, self.asked = wheels, []

    def __call__(self, spec_text: str) -> Path:
        from packaging.requirements import Requirement
        from packaging.version import Version

        self.asked.append(spec_text)
        req = Requirement(spec_text)
        hits = [
            w
            for w in self.wheels
            if gs.wheel_name_version(w)[0] == gs.normalize(req.name)
            and req.specifier.contains(Version(gs.wheel_name_version(w)[1]))
        ]
        if not hits:
            raise RuntimeError(f"no wheel for {spec_text}")
        return max(hits, key=lambda w: Version(gs.wheel_name_version(w)[1]))


def test_resolve_walks_requirements_minus_held_excluded_and_marker_skipped(tmp_path):
    idx = tmp_path / "index"
    wheels = [
        make_wheel(
            idx,
            "engine",
            "1.0",
            [
                "lib-a>=2",
                "held-ok",
                "held-old>=3",
                "big-optional",
                'win-only; sys_platform == "win32"',
                'devtool; extra == "dev"',
                "lib-b",
            ],
        ),
        make_wheel(idx, "lib-a", "2.5", ["lib-b<2"]),
        make_wheel(idx, "lib-b", "1.5"),
        make_wheel(idx, "lib-b", "2.0"),
        make_wheel(idx, "held-old", "3.1"),
        make_wheel(idx, "late", "1.0", ["lib-b>=2"]),
    ]
    fetch = FakeIndex(wheels)
    have = {"held-ok": None, "held-old": "2.0"}
    c = gs.resolve(["engine==1.0", "late"], ENV, have, {"big-optional": "too big"}, {}, fetch)
    staged = {n: gs.wheel_name_version(w)[1] for n, w in c.staged.items()}
    assert staged == {"engine": "1.0", "late": "1.0", "lib-a": "2.5", "lib-b": "2.0", "held-old": "3.1"}
    assert c.excluded == {"big-optional": "too big"}
    assert "held-ok" in c.held and "held-old" not in c.held
    assert not any(x.startswith(("win-only", "devtool")) for x in fetch.asked)
    # lib-a asked lib-b<2 after lib-b 2.0 was staged (for the root): reported, not silently ignored
    assert c.conflicts == ["lib-b 2.0 staged, but a requirement asks lib-b<2"]


def test_an_extras_requirement_on_a_staged_name_is_no_conflict(tmp_path):
    idx = tmp_path / "index"
    wheels = [
        make_wheel(idx, "engine", "1.0", ["timm==1.0.16", 'timm>=1.0.23; extra == "timm"']),
        make_wheel(idx, "timm", "1.0.16"),
    ]
    c = gs.resolve(["engine"], ENV, {}, {}, {}, FakeIndex(wheels))
    assert set(c.staged) == {"engine", "timm"} and c.conflicts == []


def test_pins_are_staged_even_when_no_package_asks_for_them_and_failures_are_reported(tmp_path):
    idx = tmp_path / "index"
    wheels = [make_wheel(idx, "engine", "1.0", ["missing-dep"]), make_wheel(idx, "tokenizers", "0.22.2")]
    c = gs.resolve(
        ["engine"], ENV, {"tokenizers": "0.23.2"}, {}, {"tokenizers": "tokenizers==0.22.2"}, FakeIndex(wheels)
    )
    assert gs.wheel_name_version(c.staged["tokenizers"])[1] == "0.22.2"
    assert "missing-dep" in c.failed


def test_read_have_takes_both_formats_and_names_a_bad_line(tmp_path):
    f = tmp_path / "have.txt"
    f.write_text("# comment\ntorch==2.11.0+cu130\nNumPy\nabsl-py, accelerate, aiofiles.\n")
    assert gs.read_have(f) == {
        "torch": "2.11.0+cu130",
        "numpy": None,
        "absl-py": None,
        "accelerate": None,
        "aiofiles": None,
    }
    f.write_text("torch==2.11\nbad name!\n")
    with pytest.raises(SystemExit):
        gs.read_have(f)


def test_the_shipped_h200_have_list_parses():
    have = gs.read_have(gs.DEFAULT_HAVE)
    assert have["torch"] == "2.11.0+cu130" and have["tokenizers"] == "0.23.2" and "transformers" in have


# ----------------------------------------------------------------------------------- prune
def kernel_wheel(tmp_path: Path) -> Path:
    files = {
        "sgl_kernel/__init__.py": b"",
        "sgl_kernel/sm90/common_ops.abi3.so": b"90" * 100,
        "sgl_kernel/sm100/common_ops.abi3.so": b"100" * 100,
        "sgl_kernel/sm120a/common_ops.abi3.so": b"120" * 100,
        "sgl_kernel/flash_ops.abi3.so": b"fa3" * 1000,
        "sgl_kernel/flashmla_ops.abi3.so": b"mla" * 100,
        "sgl_kernel/spatial_ops.abi3.so": b"keep",
        "lib/libmscclpp_static.a": b"static" * 100,
        "lib/mscclpp.so": b"shared",
    }
    return make_wheel(tmp_path / "orig", "sglang-kernel", "0.4.5", files=files)


def test_prune_drops_other_arches_and_big_ops_and_rewrites_record(tmp_path):
    w = kernel_wheel(tmp_path)
    rule = gs.PRUNE["sglang-kernel"]
    out, dropped = gs.prune_wheel(w, tmp_path / "pruned", rule["drop"], "sm90")
    with zipfile.ZipFile(out) as z:
        names = set(z.namelist())
        record = z.read("sglang_kernel-0.4.5.dist-info/RECORD").decode()
        rows = {r[0]: r for r in csv.reader(io.StringIO(record))}
        for n in names - {"sglang_kernel-0.4.5.dist-info/RECORD"}:
            data = z.read(n)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert rows[n][1:] == [f"sha256={digest}", str(len(data))]
    assert "sgl_kernel/sm90/common_ops.abi3.so" in names and "sgl_kernel/spatial_ops.abi3.so" in names
    assert "lib/mscclpp.so" in names
    gone = {
        "sgl_kernel/sm100/common_ops.abi3.so",
        "sgl_kernel/sm120a/common_ops.abi3.so",
        "sgl_kernel/flash_ops.abi3.so",
        "sgl_kernel/flashmla_ops.abi3.so",
        "lib/libmscclpp_static.a",
    }
    assert set(dropped) == gone and not (gone & names)
    assert set(rows) == names  # RECORD lists exactly what is in the wheel


def test_pruned_wheel_installs_with_pip_offline(tmp_path):
    out, _ = gs.prune_wheel(kernel_wheel(tmp_path), tmp_path / "pruned", gs.PRUNE["sglang-kernel"]["drop"], "sm90")
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target", str(site), str(out)],
        check=True,
        capture_output=True,
    )
    assert (site / "sgl_kernel/sm90/common_ops.abi3.so").is_file()
    assert not (site / "sgl_kernel/sm100").exists() and not (site / "sgl_kernel/flash_ops.abi3.so").exists()


def test_prune_subcommand_keeps_the_original_aside_and_is_idempotent(tmp_path):
    d = tmp_path / "closure"
    w = kernel_wheel(tmp_path)
    d.mkdir()
    (d / w.name).write_bytes(w.read_bytes())
    for _ in range(2):
        assert gs.main(["prune-kernel", "--dir", str(d), "--arch", "sm90"]) == 0
    assert (d / "unpruned" / w.name).read_bytes() == w.read_bytes()
    with zipfile.ZipFile(d / w.name) as z:
        assert "sgl_kernel/sm100/common_ops.abi3.so" not in z.namelist()


# ------------------------------------------------------------------------- pack + install
def test_pack_fills_chunks_under_the_limit_and_install_takes_them_in_one_pip(tmp_path, capsys):
    src = tmp_path / "wheels"
    for i in range(6):  # ~0.4 MiB each, incompressible, so 1 MiB chunks hold two each
        make_wheel(
            src,
            f"pkg{i}",
            "1.0",
            files={f"pkg{i}/__init__.py": b"", f"pkg{i}/blob.bin": random.Random(i).randbytes(400_000)},
        )
    long_name = "pkg-with-a-name-as-long-as-" + "x" * 80  # a tar name over 100 characters (ustar's limit)
    make_wheel(src, long_name, "1.0")
    extra = make_wheel(tmp_path / "extra", "tool", "1.0")
    stage = tmp_path / "stage"
    assert gs.main(["pack", "--from", str(src), "--out", str(stage), "--chunk-mib", "1"]) == 0
    chunks = sorted(stage.glob("chunk-*.tar"))
    assert len(chunks) == 3 and all(c.stat().st_size <= 1024 * 1024 for c in chunks)
    members = [m for c in chunks for m in tarfile.open(c).getnames()]
    assert sorted(members) == sorted(f"wheels/{w.name}" for w in src.glob("*.whl"))  # each wheel once
    assert "chunk-01-of-03.tar" in (stage / "MANIFEST.txt").read_text()
    capsys.readouterr()

    site = tmp_path / "site"
    assert gs.main(["install", "--from", str(stage), "--target", str(site), "--extra", str(extra)]) == 0
    env = capsys.readouterr().out
    assert f"export PYTHONPATH={site}" in env and "export CUDA_HOME=/usr/local/cuda-13.0" in env
    assert all((site / f"pkg{i}" / "blob.bin").is_file() for i in range(6)) and (site / "tool").is_dir()
    assert (site / long_name.replace("-", "_")).is_dir()
    with pytest.raises(SystemExit):  # a second install into the same target would skip bin/: refused
        gs.main(["install", "--from", str(stage), "--target", str(site)])


def test_install_names_a_missing_chunk_and_pack_a_wheel_over_the_limit(tmp_path, capsys):
    stage = tmp_path / "stage"
    src = tmp_path / "wheels"
    make_wheel(src, "big", "1.0", files={"big/blob.bin": random.Random(9).randbytes(1_300_000)})
    with pytest.raises(SystemExit):
        gs.main(["pack", "--from", str(src), "--out", str(stage), "--chunk-mib", "1"])
    assert "big-1.0-py3-none-any.whl larger than --chunk-mib 1" in capsys.readouterr().err
    make_wheel(src, "small", "1.0")
    gs.main(["pack", "--from", str(src), "--out", str(stage), "--chunk-mib", "2"])
    (src / "big-1.0-py3-none-any.whl").unlink()
    stage.mkdir(exist_ok=True)
    for c in stage.glob("chunk-*"):
        c.rename(stage / c.name.replace("-of-01", "-of-02"))
    with pytest.raises(SystemExit):
        gs.main(["install", "--from", str(stage), "--target", str(tmp_path / "site")])
    assert "lacks chunk-02-of-02.tar" in capsys.readouterr().err


def test_have_lists_what_a_site_dir_holds_in_the_format_closure_reads(tmp_path):
    site = tmp_path / "site"
    for name in ("Alpha_Pkg", "beta"):
        w = make_wheel(tmp_path / "w", name, "2.1.0")
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target", str(site), str(w)],
            check=True,
            capture_output=True,
        )
    out = tmp_path / "have.txt"
    assert gs.main(["have", "--path", str(site), "--out", str(out)]) == 0
    assert [x for x in out.read_text().splitlines() if not x.startswith("#")] == ["alpha-pkg==2.1.0", "beta==2.1.0"]
    assert gs.read_have(out) == {"alpha-pkg": "2.1.0", "beta": "2.1.0"}
