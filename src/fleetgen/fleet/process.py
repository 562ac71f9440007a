"""Process-tree checks and shutdown that never hit a reused pid."""

from __future__ import annotations

import os
import signal
import time

import psutil


def find_process(pid: int, create_time: float) -> psutil.Process | None:
    """The process if it still runs and is the one we started (same start time)."""
    try:
        p = psutil.Process(pid)
        if abs(p.create_time() - create_time) > 1.0 or p.status() == psutil.STATUS_ZOMBIE:
            return None
        return p
    except psutil.Error:
        return None


def is_alive(pid: int, create_time: float) -> bool:
    return find_process(pid, create_time) is not None


def process_tree(pid: int, create_time: float) -> list[psutil.Process]:
    p = find_process(pid, create_time)
    if p is None:
        return []
    try:
        return [p, *p.children(recursive=True)]
    except psutil.Error:
        return [p]


def stop_processes(targets: list[tuple[int, float]], grace_s: float) -> list[int]:
    """SIGTERM each replica's process group, SIGKILL what is left after `grace_s`; returns pids stopped."""
    procs: list[psutil.Process] = []
    for pid, ctime in targets:
        tree = process_tree(pid, ctime)
        if not tree:
            continue
        procs.extend(tree)
        _signal_group(pid, signal.SIGTERM)
        for child in tree:
            _signal(child, signal.SIGTERM)
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for p in alive:
        _signal(p, signal.SIGKILL)
    for pid, _ in targets:
        _signal_group(pid, signal.SIGKILL)
    psutil.wait_procs(alive, timeout=5)
    _reap([pid for pid, _ in targets])
    return [p.pid for p in procs]


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
