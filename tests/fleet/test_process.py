"""Stopping a replica's processes: orphans of a dead server are found by process group and stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import psutil

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
