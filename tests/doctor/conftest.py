"""Fixtures of the doctor tests; the fakes themselves live in doctor_fakes.py."""

from __future__ import annotations

import os
import shutil
import sys

import pytest
from doctor_fakes import FakeMachine, sm120_nvml


@pytest.fixture
def machine(tmp_path) -> FakeMachine:
    """The seed's machine, broken the way it was: sm_120 GPUs, CUDA only from pip, nothing on the paths."""
    m = FakeMachine(root=tmp_path, nvml=sm120_nvml())
    (tmp_path / "bin").mkdir()
    (tmp_path / "venv-bin").mkdir()
    for tool in ("sh", "cat"):
        os.symlink(shutil.which(tool), tmp_path / "bin" / tool)
    # The engine's venv: its python and ninja exist, but its bin/ is not on PATH (an unactivated venv).
    os.symlink(sys.executable, tmp_path / "venv-bin" / "python")
    (tmp_path / "venv-bin" / "ninja").write_text("#!/bin/sh\necho 1.13.2\n")
    (tmp_path / "venv-bin" / "ninja").chmod(0o755)
    m.env = {"PATH": str(tmp_path / "bin"), "PYTHONPATH": str(m.pymods), "HOME": str(tmp_path)}
    m.pymods.mkdir()
    m.pip_cuda_tree()
    m.driver()
    m.fake_torch()
    return m
