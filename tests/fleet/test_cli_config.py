"""`--config FILE` and flags: typed flags win, the file wins over flag defaults."""

from __future__ import annotations

import subprocess
import sys


def up(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fleetgen.cli.app", "up", *args], capture_output=True, text=True, timeout=120
    )


def test_yaml_value_is_used_when_no_flag_is_typed(tmp_path):
    cfg = tmp_path / "fleet.yaml"
    cfg.write_text(f"model: {tmp_path}/from-yaml\ngpus: none\nstartup_timeout_s: 5\nstate_dir: {tmp_path}/s\n")
    proc = up("--config", str(cfg))
    assert proc.returncode == 2
    assert "from-yaml" in proc.stderr


def test_typed_flag_overrides_the_yaml(tmp_path):
    cfg = tmp_path / "fleet.yaml"
    cfg.write_text(f"model: {tmp_path}/from-yaml\ngpus: none\nstartup_timeout_s: 5\nstate_dir: {tmp_path}/s\n")
    proc = up("--config", str(cfg), "--model", str(tmp_path / "from-flag"))
    assert proc.returncode == 2
    assert "from-flag" in proc.stderr and "from-yaml" not in proc.stderr


def test_a_bad_field_in_the_yaml_names_the_file_and_field(tmp_path):
    cfg = tmp_path / "fleet.yaml"
    cfg.write_text("replicaz: 2\n")
    proc = up("--config", str(cfg))
    assert proc.returncode == 2
    assert str(cfg) in proc.stderr and "replicaz" in proc.stderr
