"""Stopping a replica's processes: orphans of a dead server are found by process group and stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import psutil
import pytest

from fleetgen.fleet.process import group_members, is_alive, stop_processes


def spawn_group() -> tuple[subprocess.Popen, float]:
    """A leader with two children in its own session, like a server with its engine workers."""
    p = subprocess.Popen(["bash", "-c", "sleep 300 & sleep 300 & wait"], start_new_session=True)
    deadline = time.monotonic() + 5
    while len(group_members(p.pid)) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    return p, psutil.Process(p.pid).create_time()


def test_orphans_of_a_killed_leader_are_stopped():
    p, ctime = spawn_group()
    assert len(group_members(p.pid)) == 3
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert not is_alive(p.pid, ctime)
    orphans = group_members(p.pid)
    assert len(orphans) == 2, "the workers outlive their leader"
    stopped = stop_processes([(p.pid, ctime)], grace_s=2)
    assert sorted(stopped) == sorted(o.pid for o in orphans)
    assert group_members(p.pid) == []


def test_stop_is_a_no_op_for_a_group_that_is_gone():
    p, ctime = spawn_group()
    stop_processes([(p.pid, ctime)], grace_s=2)
    p.wait()
    assert stop_processes([(p.pid, ctime)], grace_s=1) == []


def test_a_reused_pid_is_not_taken_for_the_replica():
    p, ctime = spawn_group()
    try:
        assert is_alive(p.pid, ctime)
        assert not is_alive(p.pid, ctime - 100), "another start time means another process"
    finally:
        stop_processes([(p.pid, ctime)], grace_s=1)


def test_a_step_of_the_wall_clock_does_not_hide_a_live_process(monkeypatch):
    """A laptop resumed from suspend, or a paused VM: the boot time psutil reads moves with the clock."""
    from fleetgen.fleet.process import started

    p = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        ctime, boot = started(p.pid)
        real = psutil._psplatform.boot_time
        monkeypatch.setattr(psutil._psplatform, "boot_time", lambda: real() + 3600.0)  # the clock stepped an hour
        assert psutil.Process(p.pid).create_time() == pytest.approx(ctime + 3600, abs=1)
        assert is_alive(p.pid, ctime, boot)
        assert not is_alive(p.pid, ctime), "without the boot time, the step reads as another process"
        assert not is_alive(p.pid, ctime - 100, boot), "another start time is still another process"
        assert stop_processes([(p.pid, ctime, boot)], grace_s=2) == [p.pid]
    finally:
        p.kill()
        p.wait()


def test_cpu_seconds_of_counts_a_replicas_own_tree_and_nothing_of_a_process_gone():
    from fleetgen.fleet.process import started
    from fleetgen.fleet.state import ReplicaState
    from fleetgen.fleet.usage import cpu_seconds_of

    gone = subprocess.Popen(["sleep", "0.1"], start_new_session=True)
    ctime, boot = started(gone.pid)
    replica = ReplicaState.model_construct(pid=gone.pid, create_time=ctime, boot_time=boot)
    gone.wait()
    assert cpu_seconds_of(replica) == 0.0  # gone: not counted (nor a later process on its pid)
    spin = subprocess.Popen(
        [
            "python3",
            "-c",
            "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\ntime.sleep(60)",
        ],
        start_new_session=True,
    )
    try:
        ctime, boot = started(spin.pid)
        replica = ReplicaState.model_construct(pid=spin.pid, create_time=ctime, boot_time=boot)
        deadline = time.monotonic() + 60
        while cpu_seconds_of(replica) < 0.3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert cpu_seconds_of(replica) >= 0.3
    finally:
        spin.kill()
        spin.wait()
