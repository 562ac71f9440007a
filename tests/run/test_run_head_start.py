"""`fleetgen run` starts the fleet while the mix is built, and stops it when the mix fails (issue 43).

Real vLLM-CPU replicas are launched (the quickstart's fleet, on ports of its own). The mix's second
source is a file that is not there: the mix fails about a second in, while the replicas are still
starting, and the run must leave none of them behind.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml
from real_fleet import engine_available, free_port_base

from fleetgen.errors import FleetError
from fleetgen.fleet import read_state

pytestmark = pytest.mark.engine

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _need_engine():
    why = engine_available()
    if why:
        pytest.skip(f"real engine unavailable: {why}")


def engines_on(ports: list[int]) -> list[psutil.Process]:
    """Processes whose command line serves one of `ports`."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info.get("cmdline") or []
        if any(a == "--port" and i + 1 < len(cmd) and cmd[i + 1] in {str(x) for x in ports} for i, a in enumerate(cmd)):
            found.append(p)
    return found


def test_a_failed_mix_stops_the_fleet_that_started_beside_it(tmp_path):
    job = yaml.safe_load((REPO / "examples" / "quickstart.yaml").read_text())
    job["workdir"] = str(tmp_path / "work")
    base = free_port_base(2, 24000)
    job["fleet"]["port_base"] = base
    job["mix"]["sources"][0]["path"] = str(REPO / "examples" / job["mix"]["sources"][0]["path"])
    job["mix"]["sources"][1]["path"] = str(tmp_path / "not-there.jsonl")
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))

    proc = subprocess.run(
        [sys.executable, "-m", "fleetgen.cli.app", "run", str(path)], capture_output=True, text=True, timeout=300
    )
    out = proc.stderr
    assert proc.returncode == 2, out[-3000:]
    assert out.index("[fleet] start") < out.index("error:"), "the fleet started before the mix failed"
    assert "not-there.jsonl" in out
    deadline = time.monotonic() + 30  # a process may take its grace period to go
    while engines_on([base, base + 1]) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert engines_on([base, base + 1]) == [], "a replica outlived the failed run"
    with pytest.raises(FleetError):
        read_state(tmp_path / "work" / "fleet")  # cleared
