"""What a replica's process tree holds and has used: host memory (PSS), GPU memory (NVML), CPU time."""

from __future__ import annotations

from collections.abc import Iterable

import psutil

from fleetgen.fleet.process import process_tree
from fleetgen.fleet.state import ReplicaState


def memory_of(replica: ReplicaState) -> float:
    """Proportional set size of the replica's process tree: shared torch pages counted once."""
    total = 0
    for p in process_tree(replica.pid, replica.create_time, replica.boot_time):
        try:
            info = p.memory_full_info()
            total += getattr(info, "pss", info.rss)
        except psutil.Error:
            pass
    return total / 2**20


def cpu_seconds_of(replica: ReplicaState) -> float:
    """User + system CPU the replica's process tree has used: its work, whatever its neighbours did."""
    return cpu_seconds(process_tree(replica.pid, replica.create_time, replica.boot_time))


def cpu_seconds(procs: Iterable[psutil.Process]) -> float:
    """User + system CPU of these processes; one gone since counts nothing."""
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def gpu_memory_of(replica: ReplicaState) -> float | None:
    """GPU memory held by this replica's own process tree (NVML), not by whoever shares its GPU."""
    try:
        import pynvml
    except ImportError:
        return None
    pids = {p.pid for p in process_tree(replica.pid, replica.create_time, replica.boot_time)}
    try:
        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        used = 0
        for gpu in replica.gpus:
            h = pynvml.nvmlDeviceGetHandleByIndex(gpu)
            for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
                if proc.pid in pids and proc.usedGpuMemory:
                    used += proc.usedGpuMemory
        return used / 2**20
    finally:
        pynvml.nvmlShutdown()
