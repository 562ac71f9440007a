"""Each of the seed user's 8 SM120 environment failures is found, named, fixed, and passes after the fix."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from doctor_fakes import FakeMachine, h200_nvml, nvcc_script

from fleetgen.doctor import Status, engine_args_for_replicas

SGLANG_PIN = "torch==2.9.1"


def _tree(path: Path) -> set[tuple[str, bool]]:
    return {(str(p.relative_to(path)), p.is_symlink()) for p in path.rglob("*")}


# 1. torch / sgl_kernel ABI mismatch (undefined symbol) ---------------------------------------------
ABI_KERNEL = """
    import torch
    BUILT_FOR = "2.9.1"
    if torch.__version__.split("+")[0] != BUILT_FOR:
        raise ImportError(__file__.rsplit("/", 1)[0]
                          + "/sm100/common_ops.abi3.so: undefined symbol: _ZNK3c106SymInt22maybe_as_int_slow_pathEv")
"""


def test_torch_abi_mismatch_names_the_torch_the_kernel_needs(machine: FakeMachine):
    machine.dist_info("sglang", "0.5.5", requires=(SGLANG_PIN, "sgl-kernel==0.3.16"))
    machine.dist_info("sgl-kernel", "0.3.16")
    machine.sgl_kernel(ABI_KERNEL, arch_dirs=("sm90", "sm100", "sm120"))
    c = machine.doctor(engine="sglang").get("kernels.sglang")
    assert c.status is Status.FAIL and c.cause == "torch_abi_mismatch"
    assert "torch==2.9.1" in c.summary and "2.11.0" in c.summary and "_ZNK3c106SymInt" in c.summary
    assert any("'torch==2.9.1'" in cmd for cmd in c.fix.commands)
    machine.fake_torch(version="2.9.1+cu130")  # what the proposed command does
    assert machine.doctor(engine="sglang").get("kernels.sglang").status is Status.OK


# 2. the kernel wheel has sm90/sm100 builds only --------------------------------------------------------
ARCH_KERNEL = """
    import os
    here = os.path.dirname(__file__)
    if not os.path.isdir(os.path.join(here, "sm120")):
        raise ImportError(
            "[sgl_kernel] CRITICAL: Could not load any common_ops library!\\n"
            "- ImportError: no kernel image is available for execution on the device\\n"
            "GPU Info: Compute capability: 120, Expected variant: SM120, CUDA version: 13.0")
"""


def test_kernel_wheel_without_sm120_build(machine: FakeMachine):
    machine.dist_info("sglang", "0.5.5", requires=("torch==2.11.0",))
    machine.sgl_kernel(ARCH_KERNEL, arch_dirs=("sm90", "sm100"))
    c = machine.doctor(engine="sglang").get("kernels.sglang")
    assert c.status is Status.FAIL and c.cause == "no_kernel_for_arch"
    assert "sm100, sm90" in c.summary and "sm_120" in c.summary
    assert "TORCH_CUDA_ARCH_LIST=12.0" in c.fix.summary
    machine.sgl_kernel(ARCH_KERNEL, arch_dirs=("sm90", "sm100", "sm120"))  # a wheel with an sm120 build
    assert machine.doctor(engine="sglang").get("kernels.sglang").status is Status.OK


def test_kernel_that_imports_but_lacks_the_arch_is_still_caught(machine: FakeMachine):
    machine.sgl_kernel("", arch_dirs=("sm90", "sm100"))
    c = machine.doctor(engine="sglang").get("kernels.sglang")
    assert c.cause == "no_kernel_for_arch"


# 3. libnvrtc.so.13 not on the loader path (it is in site-packages/nvidia/cu13/lib) ------------------------
LOADER_KERNEL = """
    import ctypes
    ctypes.CDLL("libnvrtc.so.13")  # the real dynamic loader, so the real message
"""


def test_missing_libnvrtc_is_found_in_pip_tree_and_put_on_loader_path(machine: FakeMachine):
    machine.sgl_kernel(LOADER_KERNEL, arch_dirs=("sm90", "sm100", "sm120"))
    report = machine.doctor(engine="sglang")
    c = report.get("kernels.sglang")
    assert c.status is Status.FAIL and c.cause == "missing_library"
    assert "libnvrtc.so.13" in c.summary and str(machine.cu13 / "lib" / "libnvrtc.so.13") in c.summary
    assert c.fix.prepend == {"LD_LIBRARY_PATH": [str(machine.cu13 / "lib")]}
    assert report.get("loader.cuda_libs").cause == "library_not_on_loader_path"
    after, _ = machine.fix_and_recheck(report, engine="sglang")
    assert after.get("kernels.sglang").status is Status.OK
    assert after.get("loader.cuda_libs").status is Status.OK


def test_real_compound_sgl_kernel_message_is_classified(machine: FakeMachine):
    # Verbatim shape of sgl_kernel 0.3.21's error on a CUDA-13 venv (libnvrtc not on the loader path).
    machine.sgl_kernel(
        '''
        raise ImportError("""[sgl_kernel] CRITICAL: Could not load any common_ops library!
        - ImportError: libnvrtc.so.13: cannot open shared object file: No such file or directory
        - ModuleNotFoundError: No module named 'common_ops'
        GPU Info: Compute capability: 120, Expected variant: SM120, CUDA version: 13.0""")
    ''',
        arch_dirs=("sm90", "sm100", "sm120"),
    )
    c = machine.doctor(engine="sglang").get("kernels.sglang")
    assert c.cause == "missing_library" and c.fix.prepend["LD_LIBRARY_PATH"] == [str(machine.cu13 / "lib")]


def test_libcudart_of_another_cuda_major_says_the_wheel_is_for_another_cuda(machine: FakeMachine):
    machine.sgl_kernel('import ctypes; ctypes.CDLL("libcudart.so.12")', arch_dirs=("sm120",))
    c = machine.doctor(engine="sglang").get("kernels.sglang")
    assert c.cause == "missing_library" and "CUDA 12 but torch is CUDA 13" in c.summary
    assert any("nvidia-cuda-runtime-cu12==12.*" in cmd for cmd in c.fix.commands)


# 4-7. the JIT toolchain: nvcc, CUDA_HOME layout, CCCL headers, ninja --------------------------------------
def test_pip_only_cuda_toolchain_problems_are_found_then_fixed_by_the_overlay(machine: FakeMachine):
    before_pip = _tree(machine.sp)
    report = machine.doctor()
    by = {c.id: c for c in report.checks}
    assert (
        by["toolchain.cuda_home"].cause == "cuda_home_missing"
        and str(machine.cu13) in by["toolchain.cuda_home"].summary
    )
    assert by["toolchain.nvcc"].cause == "nvcc_missing"
    assert any("nvidia-cuda-nvcc==13.0.*" in cmd for cmd in by["toolchain.nvcc"].fix.commands)
    assert by["toolchain.cuda_layout"].cause == "cuda_layout_incomplete"
    assert set(by["toolchain.cuda_layout"].evidence["missing"]) == {
        "lib64/",
        "lib64/libcudart.so",
        "lib64/stubs/libcuda.so",
    }
    assert by["toolchain.cccl"].cause == "cccl_missing"
    assert by["toolchain.ninja"].cause == "ninja_not_on_path"

    # The user runs the two package commands the doctor printed (pip's cu13 layout for nvcc and CCCL).
    nvcc_script(machine.cu13 / "bin" / "nvcc")
    for name in ("nv", "cuda", "cub", "thrust"):
        (machine.cu13 / "include" / "cccl" / name).mkdir(parents=True)
    (machine.cu13 / "include" / "cccl" / "nv" / "target").touch()
    before_pip = _tree(machine.sp)

    report = machine.doctor()
    assert report.get("toolchain.nvcc").status is Status.FAIL  # still no CUDA_HOME to hold it
    after, fix_dir = machine.fix_and_recheck(report)
    for cid in ("toolchain.cuda_home", "toolchain.nvcc", "toolchain.cuda_layout", "toolchain.cccl", "toolchain.ninja"):
        assert after.get(cid).status is Status.OK, after.get(cid)
    overlay = fix_dir / "cuda"
    assert after.get("toolchain.cuda_home").evidence["overlay"] is True
    assert os.path.realpath(overlay / "lib64" / "libcudart.so") == str(machine.cu13 / "lib" / "libcudart.so.13")
    assert os.path.realpath(overlay / "lib64" / "stubs" / "libcuda.so") == str(machine.root / "driver" / "libcuda.so.1")
    assert (overlay / "include" / "nv" / "target").exists() and (overlay / "include" / "cuda_runtime.h").exists()
    # Everything in the overlay is a link or a directory fleetgen made; pip's tree is untouched.
    assert all(p.is_symlink() or p.is_dir() or p.name == ".fleetgen-overlay" for p in overlay.rglob("*"))
    assert _tree(machine.sp) == before_pip
    # The env script exports the same thing, and a real shell agrees.
    out = subprocess.run(
        ["sh", "-c", f". {fix_dir}/env.sh && echo $CUDA_HOME && command -v nvcc && command -v ninja"],
        env=machine.env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out == [str(overlay), str(overlay / "bin" / "nvcc"), str(machine.root / "venv-bin" / "ninja")]


def test_cuda_home_without_nvcc_links_the_one_on_path(machine: FakeMachine):
    home = machine.system_toolkit(machine.root / "cuda-13.0")
    (home / "bin" / "nvcc").unlink()
    other = nvcc_script(machine.root / "opt-nvcc" / "bin" / "nvcc")
    machine.env |= {"CUDA_HOME": str(home), "PATH": f"{other.parent}:{machine.env['PATH']}:{machine.root / 'venv-bin'}"}
    report = machine.doctor()
    c = report.get("toolchain.nvcc")
    assert c.cause == "nvcc_outside_cuda_home" and str(other) in c.summary
    after, fix_dir = machine.fix_and_recheck(report)
    assert after.get("toolchain.nvcc").status is Status.OK
    assert after.get("toolchain.cuda_layout").status is Status.OK
    assert _tree(home) == _tree(home)  # sanity: the toolkit still lists
    assert not (home / "bin" / "nvcc").exists()  # the toolkit itself was not edited


def test_nvcc_too_old_for_sm120(machine: FakeMachine):
    home = machine.system_toolkit(machine.root / "cuda-12.4", release="12.4")
    machine.env |= {"CUDA_HOME": str(home)}
    c = machine.doctor().get("toolchain.nvcc")
    assert c.status is Status.FAIL and c.cause == "nvcc_arch_unsupported"
    assert "nvcc 12.4" in c.summary and "sm_120 needs >= 12.8" in c.summary


def test_cccl_only_under_include_cccl_is_a_warning_the_overlay_fixes(machine: FakeMachine):
    home = machine.system_toolkit(machine.root / "cuda")
    (home / "include" / "nv" / "target").unlink()
    (home / "include" / "nv").rmdir()
    machine.env |= {"CUDA_HOME": str(home), "PATH": f"{machine.env['PATH']}:{machine.root / 'venv-bin'}"}
    report = machine.doctor()
    c = report.get("toolchain.cccl")
    assert c.status is Status.WARN and c.cause == "cccl_not_on_include_path"
    after, fix_dir = machine.fix_and_recheck(report)
    assert after.get("toolchain.cccl").status is Status.OK
    assert os.path.realpath(fix_dir / "cuda" / "include" / "nv") == str(home / "include" / "cccl" / "nv")
    assert not (home / "include" / "nv").exists()


def test_ninja_missing_everywhere(machine: FakeMachine):
    (machine.root / "venv-bin" / "ninja").unlink()
    c = machine.doctor().get("toolchain.ninja")
    assert c.cause == "ninja_missing" and c.fix.commands == [
        f"{machine.root / 'venv-bin' / 'python'} -m pip install ninja"
    ]


# 8. FA3/FA4 attention does not run on SM120 -------------------------------------------------------------
def test_fa3_on_sm120_fails_and_the_fix_pins_flashinfer(machine: FakeMachine):
    report = machine.doctor(engine="sglang", engine_args=["--attention-backend", "fa3"])
    c = report.get("attention.backend")
    assert c.status is Status.FAIL and c.cause == "attention_backend_unsupported"
    assert "fa3" in c.summary and "sm_120" in c.summary
    assert c.fix.engine_args == ["--attention-backend", "flashinfer"]
    _, fix_dir = machine.fix_and_recheck(report, engine="sglang")
    args = engine_args_for_replicas(fix_dir)
    assert args[:2] == ["--attention-backend", "flashinfer"]
    assert machine.doctor(engine="sglang", engine_args=args).get("attention.backend").status is Status.OK


def test_unpinned_backend_on_sm120_is_a_warning_with_the_flag(machine: FakeMachine):
    c = machine.doctor(engine="sglang").get("attention.backend")
    assert c.status is Status.WARN and c.fix.engine_args == ["--attention-backend", "flashinfer"]


def test_fa3_on_hopper_is_fine(machine: FakeMachine):
    machine.nvml = h200_nvml()
    assert (
        machine.doctor(engine="sglang", engine_args=["--attention-backend=fa3"]).get("attention.backend").status
        is Status.OK
    )
