"""The engine's server module must import: the H200 case the other checks passed in silence.

Real case (fixtures/h200-sglang-*): on the H200 image every doctor check was ok, but without sglang's
`transformers==5.6.0` pin `import sglang.launch_server` failed ('qwen3_asr' is already used by a
Transformers config) and no replica could have started.
"""

from __future__ import annotations

import json
import os
import re
import sys
import textwrap

from doctor_fakes import FIXTURES, FakeMachine, h200_nvml

from fleetgen.doctor import Host
from fleetgen.doctor.engine_import import ImportProbe, check_engine_import, probe_import
from fleetgen.doctor.report import Status

HOST = Host(python="/opt/torch/.venv/bin/python3")


def _real_probe(ok: bool) -> ImportProbe:
    req = json.loads((FIXTURES / "h200-sglang-requirements-without-pin.json").read_text())
    text = (FIXTURES / "h200-sglang-import-without-pin.txt").read_text()
    files = tuple(re.findall(r'File "([^"]+)"', text))
    error = text.strip().splitlines()[-1]
    return ImportProbe(
        module="sglang.launch_server",
        dist="sglang",
        ok=ok,
        error=None if ok else error,
        files=() if ok else files,
        differs=tuple(req["differs"]),
        missing=tuple(req["missing"]),
    )


def test_the_real_h200_failure_blames_the_transformers_pin_only():
    c = check_engine_import(_real_probe(ok=False), "sglang", HOST)
    assert c.status is Status.FAIL and c.cause == "requirement_mismatch"
    assert "qwen3_asr" in c.summary and "transformers==5.6.0 but 5.17.0 is installed" in c.summary
    assert c.fix.commands == ["/opt/torch/.venv/bin/python3 -m pip install 'transformers==5.6.0'"]
    assert "timm" not in c.fix.commands[0]  # timm differs too (1.0.29 vs ==1.0.16) but is not in the traceback
    assert "xgrammar==0.2.0" in c.evidence["requirements_missing"]


def test_a_difference_that_does_not_break_the_import_is_reported_not_failed():
    # With the pin in place the same environment imported (18 s) and served; timm still differs.
    probe = _real_probe(ok=True)
    probe = ImportProbe(**{**probe.__dict__, "differs": tuple(d for d in probe.differs if d["name"] == "timm")})
    c = check_engine_import(probe, "sglang", HOST)
    assert c.status is Status.OK and "timm==1.0.16 (installed 1.0.29)" in c.summary


def _fake_engine(machine: FakeMachine, installed: str, breaks: bool) -> None:
    pkg = machine.pymods / "fakeformers"
    pkg.mkdir(exist_ok=True)
    body = (
        "raise ValueError(\"'qwen3_asr' is already used by a Transformers config, pick another name.\")"
        if breaks
        else ""
    )
    (pkg / "__init__.py").write_text(body + "\n")
    srv = machine.pymods / "sglang"
    srv.mkdir(exist_ok=True)
    (srv / "__init__.py").write_text("")
    (srv / "launch_server.py").write_text(
        textwrap.dedent("""
        import fakeformers  # sglang/srt/configs registers its configs with transformers at import
    """)
    )
    machine.dist_info(
        "sglang",
        "0.5.12",
        requires=("fakeformers==5.6.0", "timm-fake==1.0.16", "absent-dep>=1", "extra-only>=1; extra == 'test'"),
    )
    machine.dist_info("fakeformers", installed)
    machine.dist_info("timm-fake", "1.0.29")


def test_the_probe_imports_the_server_module_in_the_engines_python(tmp_path):
    machine = FakeMachine(root=tmp_path, nvml=h200_nvml())
    machine.pymods.mkdir()
    (tmp_path / "venv-bin").mkdir()
    os.symlink(sys.executable, tmp_path / "venv-bin" / "python")
    machine.env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(machine.pymods), "HOME": str(tmp_path)}
    _fake_engine(machine, "5.17.0", breaks=True)
    c = check_engine_import(probe_import(machine.host(), "sglang"), "sglang", machine.host())
    assert c.status is Status.FAIL and c.cause == "requirement_mismatch", c.summary
    assert c.evidence["blamed"] == ["fakeformers==5.6.0"]
    assert c.evidence["requirements_missing"] == ["absent-dep>=1"]
    _fake_engine(machine, "5.6.0", breaks=False)  # what the proposed command does
    c = check_engine_import(probe_import(machine.host(), "sglang"), "sglang", machine.host())
    assert c.status is Status.OK and "timm-fake==1.0.16 (installed 1.0.29)" in c.summary


def test_an_engine_that_is_not_installed_is_left_to_the_kernels_check():
    probe = ImportProbe(
        module="sglang.launch_server", dist="sglang", error="ModuleNotFoundError: No module named 'sglang'"
    )
    assert check_engine_import(probe, "sglang", HOST).status is Status.SKIP
    probe = ImportProbe(
        module="sglang.launch_server", dist="sglang", error="ModuleNotFoundError: No module named 'zmq'"
    )
    assert check_engine_import(probe, "sglang", HOST).status is Status.FAIL
