"""Which GPUs (or CPU cores) each replica gets."""

from __future__ import annotations

import fcntl
import os
import re
from pathlib import Path

from fleetgen.errors import ConfigError
from fleetgen.gpu_info import GpuInfo


def gpu_kind(gpus: list[GpuInfo]) -> str:
    """What a replica's compiled kernels depend on: the GPU model and arch of its group, e.g. `nvidia-h200-sm90-x1`."""
    names = sorted(
        {
            f"{re.sub(r'[^a-z0-9]+', '-', g.name.lower()).strip('-')}"
            f"-sm{g.compute_capability[0]}{g.compute_capability[1]}"
            for g in gpus
        }
    )
    return "+".join(names) + f"-x{len(gpus)}"


def gpu_groups(
    gpus: str, tp: int, replicas: int | None, available: list[int], per_group: int = 1
) -> list[tuple[int, ...]]:
    """Split the chosen GPUs into consecutive groups of `tp`, one group per replica.

    With `per_group` > 1 each group serves that many replicas, listed round-robin (group 0, 1, ...,
    then group 0 again), so fewer replicas than slots still spread over every group.
    """
    chosen = available if gpus == "all" else [int(x) for x in gpus.split(",")]
    missing = sorted(set(chosen) - set(available))
    if missing:
        raise ConfigError(
            f"--gpus names GPU(s) {missing} but this machine has {available or 'none'}",
            hint="run `fleetgen doctor` to list the GPUs",
        )
    groups = [tuple(chosen[i : i + tp]) for i in range(0, len(chosen) - tp + 1, tp)]
    if not groups:
        raise ConfigError(f"--tp {tp} needs {tp} GPUs per replica but only {len(chosen)} are chosen")
    groups = [g for _ in range(per_group) for g in groups]
    if replicas is None:
        return groups
    if replicas > len(groups):
        per = f" and --replicas-per-gpu {per_group}" if per_group > 1 else ""
        raise ConfigError(
            f"--replicas {replicas} with --tp {tp}{per} needs {-(-replicas // per_group) * tp} GPUs; {len(chosen)} are "
            "chosen",
            hint="lower --replicas or --tp, raise --replicas-per-gpu (a small model), or pass more --gpus",
        )
    return groups[:replicas]


def sharing_waves(slots: list[int]) -> list[list[int]]:
    """Positions grouped by GPU slot: a replica starts only once those before it on its GPU are up.

    An engine sizes its memory from what is free when it starts (SGLang's --mem-fraction-static
    is a share of the memory free before its weights load); two starting together on one GPU
    each count the other's memory as free and one runs out.
    """
    waves: dict[int, list[int]] = {}
    for pos, slot in enumerate(slots):
        waves.setdefault(slot, []).append(pos)
    return [waves[k] for k in sorted(waves)]


def cpu_shares(replicas: int, cores: list[int] | None = None) -> list[tuple[int, ...]]:
    """Give each CPU replica its own contiguous share of cores; share them when there are too few."""
    cores = sorted(cores if cores is not None else os.sched_getaffinity(0))
    if replicas <= len(cores):
        per = len(cores) // replicas
        return [tuple(cores[i * per : (i + 1) * per]) for i in range(replicas)]
    return [(cores[i % len(cores)],) for i in range(replicas)]


def claim_cores(count: int, lock_dir: Path, cores: list[int] | None = None) -> tuple[tuple[int, ...], list[int]]:
    """Up to `count` cores of this host that no other live replica holds, and the open lock files that hold them.

    Ray places actors by CPU count, not by core: CPU replicas sharing a host would all bind their
    threads to the same cores and starve one another. Each core is an flock on its own file, so a
    claim ends when its files are closed or its process dies; nothing stale is left behind.
    """
    lock_dir.mkdir(parents=True, exist_ok=True)
    held: list[int] = []
    fds: list[int] = []
    for core in sorted(cores if cores is not None else os.sched_getaffinity(0)):
        if len(held) == count:
            break
        try:
            fd = os.open(lock_dir / f"core-{core}.lock", os.O_CREAT | os.O_RDWR, 0o600)
        except OSError:
            continue  # another user's claim file: not ours to take
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        held.append(core)
        fds.append(fd)
    return tuple(held), fds
