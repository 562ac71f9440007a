"""`up` warns when servers would listen beyond loopback without a key; the test never binds a non-loopback address:
the model path does not exist, so `up` stops right after planning, before any port check or server."""

from __future__ import annotations

import pytest
from faultkit import run_cli

from fleetgen.fleet import FleetConfig
from fleetgen.fleet.launcher import exposure_warning
from fleetgen.fleet.local import LocalBackend


@pytest.mark.parametrize(
    "host,key,warns",
    [
        ("127.0.0.1", None, False),
        ("127.0.0.5", None, False),
        ("::1", None, False),
        ("localhost", None, False),
        ("0.0.0.0", None, True),
        ("10.1.2.3", None, True),
        ("::", None, True),
        ("gpu-node-7", None, True),
        ("0.0.0.0", "k", False),
    ],
)
def test_exposure_warning(host, key, warns):
    assert bool(exposure_warning(FleetConfig(host=host, api_key=key), LocalBackend())) == warns


def test_up_prints_the_warning_before_doing_anything(tmp_path):
    args = [
        "up",
        "--host",
        "10.255.255.1",
        "--gpus",
        "none",
        "--model",
        str(tmp_path / "no-model"),
        "--state",
        str(tmp_path / "st"),
    ]
    r = run_cli(*args, env={"PATH": "/usr/bin:/bin"})
    assert r.returncode == 2 and "model path does not exist" in r.stderr
    assert "warning: binding to 10.255.255.1 without an API key" in r.stderr
    r = run_cli(*args, "--api-key", "secret-abc")
    assert r.returncode == 2 and "warning: binding" not in r.stderr
