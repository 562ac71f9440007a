"""scripts/uv_pip.py: pip's configuration carried onto uv, or refused so the setup falls back to pip.

The last test runs the pinned uv that scripts/setup.sh installs into .venv, against two tiny wheels
in a local directory named only through pip's environment settings (no network)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "uv_pip.py"
spec = importlib.util.spec_from_file_location("uv_pip", SCRIPT)
uv_pip = importlib.util.module_from_spec(spec)
spec.loader.exec_module(uv_pip)

LISTED = """\
global.cert='/etc/ssl/certs/ca.crt'
global.constraint='/etc/pip/constraints.txt'
global.extra-index-url='file:///opt/a/simple file:///opt/b/simple'
global.find-links='/opt/global-wheels'
install.find-links='/opt/install-wheels'
:env:.find-links='/opt/env-wheels\\n/opt/more-wheels'
:env:.disable-pip-version-check='1'
:env:.default-timeout='180'
:env:.no-index='false'
download.dest='/ignored/other/command'
"""


def test_settings_take_the_environment_over_install_over_global():
    got = uv_pip.settings(LISTED)
    assert got["find-links"] == "/opt/env-wheels\n/opt/more-wheels"
    assert got["cert"] == "/etc/ssl/certs/ca.crt"
    assert "dest" not in got


def test_uv_options_carry_sources_constraints_and_certificate():
    flags, env = uv_pip.uv_options(uv_pip.settings(LISTED))
    pairs = list(zip(flags[::2], flags[1::2]))
    assert pairs[0] == ("--index-strategy", "unsafe-best-match")
    assert [v for f, v in pairs if f == "--find-links"] == ["/opt/env-wheels", "/opt/more-wheels"]
    assert [v for f, v in pairs if f == "--extra-index-url"] == ["file:///opt/a/simple", "file:///opt/b/simple"]
    assert [v for f, v in pairs if f == "--constraint"] == ["/etc/pip/constraints.txt"]
    assert "--no-index" not in flags
    assert env == {"SSL_CERT_FILE": "/etc/ssl/certs/ca.crt", "UV_HTTP_TIMEOUT": "180"}


@pytest.mark.parametrize("line", ["global.require-hashes='1'", ":env:.no-index='maybe'", "install.user='yes'"])
def test_a_setting_uv_would_not_honour_is_refused(line):
    with pytest.raises(uv_pip.Unmappable):
        uv_pip.uv_options(uv_pip.settings(line))


def _wheel(directory: Path, version: str) -> None:
    dist = f"tinypkg-{version}"
    files = {
        "tinypkg/__init__.py": f"V = {version!r}\n",
        f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: tinypkg\nVersion: {version}\n",
        f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{dist}.dist-info/RECORD": "",
    }
    with zipfile.ZipFile(directory / f"{dist}-py3-none-any.whl", "w") as z:
        for name, text in files.items():
            z.writestr(name, text)


def test_the_pinned_uv_installs_from_where_pip_is_told_to(tmp_path):
    uv = Path(sys.executable).with_name("uv")
    if not uv.exists():
        pytest.skip(f"no uv beside {sys.executable}: scripts/setup.sh installed with pip (it says why)")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for version in ("1.0", "2.0"):
        _wheel(wheels, version)
    (tmp_path / "constraints.txt").write_text("tinypkg<2\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env |= {"PIP_FIND_LINKS": str(wheels), "PIP_NO_INDEX": "1", "PIP_CONSTRAINT": str(tmp_path / "constraints.txt")}
    out = subprocess.run(
        [sys.executable, str(SCRIPT), sys.executable, str(uv), "--", "install", "--dry-run", "tinypkg"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "tinypkg==1.0" in out.stdout + out.stderr
