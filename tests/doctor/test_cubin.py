"""`doctor` says when flashinfer-cubin is absent or mismatched, and what that costs (doctor/cubin.py).

The interpreter is real (a subprocess reads importlib.metadata); the installs are real dist-info
directories on its PYTHONPATH, with the versions SGLang 0.5.12 pins (the H200 had flashinfer without cubin).
"""

from __future__ import annotations

import os
import sys

import pytest

from fleetgen.doctor import Host
from fleetgen.doctor.cubin import check_cubin, probe_flashinfer
from fleetgen.doctor.report import Status


def dist(site, name: str, version: str) -> None:
    d = site / f"{name.replace('-', '_')}-{version}.dist-info"
    d.mkdir(parents=True)
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def doctor_check(site):
    host = Host(env={"PYTHONPATH": str(site), "PATH": os.environ.get("PATH", "")}, python=sys.executable, timeout_s=60)
    return check_cubin(probe_flashinfer(host))


def test_flashinfer_without_cubin_warns_with_the_cost_and_the_matching_install(tmp_path):
    dist(tmp_path, "sglang", "0.5.12")
    dist(tmp_path, "flashinfer-python", "0.6.11.post1")
    c = doctor_check(tmp_path)
    assert c.status is Status.WARN and c.cause == "flashinfer_cubin_missing"
    assert "JIT-compiles its sampling and attention kernels on their first use: minutes" in c.summary
    assert c.fix.commands == ["pip install 'flashinfer-cubin==0.6.11.post1'"]
    assert c.evidence["sglang"] == "0.5.12"


def test_a_cubin_of_another_version_warns(tmp_path):
    dist(tmp_path, "flashinfer-python", "0.6.11.post1")
    dist(tmp_path, "flashinfer-cubin", "0.6.10")
    c = doctor_check(tmp_path)
    assert c.status is Status.WARN and c.cause == "flashinfer_cubin_mismatch" and "0.6.10" in c.summary


@pytest.mark.parametrize(
    ("installed", "status"),
    [
        ({"flashinfer-python": "0.6.11.post1", "flashinfer-cubin": "0.6.11.post1"}, Status.OK),
        ({"sglang": "0.5.12"}, Status.SKIP),
    ],
)
def test_matching_cubin_is_ok_and_no_flashinfer_is_nothing_to_check(tmp_path, installed, status):
    for name, version in installed.items():
        dist(tmp_path, name, version)
    assert doctor_check(tmp_path).status is status


def test_an_interpreter_that_does_not_run_is_a_skip_not_a_crash(tmp_path):
    host = Host(env={}, python=str(tmp_path / "no-python"), timeout_s=10)
    c = check_cubin(probe_flashinfer(host))
    assert c.status is Status.SKIP and c.cause == "probe_failed"
