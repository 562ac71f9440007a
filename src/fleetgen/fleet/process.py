"""Process-tree checks and shutdown that never hit a reused pid."""

from __future__ import annotations

import os
import signal
import time

import psutil


def find_process(pid: int, create_time: float, boot_time: float | None = None) -> psutil.Process | None:
    """The process if it still runs and is the one we started (same start time).

    With `boot_time` (psutil's, read as `create_time` was) the start times are compared as seconds
    since boot: a create_time is that plus the boot time, which moves with every step of the wall
    clock (a laptop resumed from suspend, a paused VM), and a live replica would read as another."""
    try:
        p = psutil.Process(pid)
        if boot_time is None:
            off = p.create_time() - create_time
        else:
            off = (p.create_time() - psutil.boot_time()) - (create_time - boot_time)
        if abs(off) > 1.0 or p.status() == psutil.STATUS_ZOMBIE:
            return None
        return p
    except psutil.Error:
        return None


def started(pid: int) -> tuple[float, float]:
    """(create_time, boot_time) of a process, read together: what find_process compares later."""
    p = psutil.Process(pid)
    return p.create_time(), psutil.boot_time()


def is_alive(pid: int, create_time: float, boot_time: float | None = None) -> bool:
    return find_process(pid, create_time, boot_time) is not None


def process_tree(pid: int, create_time: float, boot_time: float | None = None) -> list[psutil.Process]:
    p = find_process(pid, create_time, boot_time)
    if p is None:
        return []
    try:
        return [p, *p.children(recursive=True)]
    except psutil.Error:
        return [p]


def group_members(pgid: int) -> list[psutil.Process]:
    """Processes still in a replica's process group: workers orphaned when their server died hold its port."""
    members = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                members.append(p)
        except (psutil.Error, ProcessLookupError, PermissionError):
            continue
    return members


def stop_processes(
    targets: list[tuple[int, float]] | list[tuple[int, float, float | None]], grace_s: float
) -> list[int]:
    """SIGTERM each replica's process group, SIGKILL what is left after `grace_s`; returns pids stopped.

    A target is (pid, create_time) or (pid, create_time, boot_time), as find_process takes them.

    The group is signalled even when its leader is gone: a group id is not reused while any
    member lives, so the members found are that replica's orphans, never someone else's.
    """
    procs: dict[int, psutil.Process] = {}
    for pid, ctime, *boot in targets:
        tree = process_tree(pid, ctime, *boot)
        members = tree + group_members(pid)
        if not members:
            continue
        procs.update((p.pid, p) for p in members)
        _signal_group(pid, signal.SIGTERM)
        for p in tree:
            _signal(p, signal.SIGTERM)
    _, alive = psutil.wait_procs(list(procs.values()), timeout=grace_s)
    for p in alive:
        _signal(p, signal.SIGKILL)
    for pid, *_ in targets:
        if group_members(pid):
            _signal_group(pid, signal.SIGKILL)
    psutil.wait_procs(alive, timeout=5)
    _reap([pid for pid, *_ in targets])
    return list(procs)


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _signal(p: psutil.Process, sig: int) -> None:
    try:
        p.send_signal(sig)
    except psutil.Error:
        pass


def _reap(pids: list[int]) -> None:
    """Collect exit statuses of our own children so they do not linger as zombies."""
    deadline = time.monotonic() + 1
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                break
            if done:
                break
            time.sleep(0.05)
