"""What became of one shard, and the check a shard makes where it runs: shared by both shard runners."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetgen.errors import InputError, OutputError
from fleetgen.fleet.state import read_state
from fleetgen.generate.config import GenerateConfig


@dataclass(frozen=True)
class ShardDone:
    """A shard that ran to its end (or was interrupted: see its stats)."""

    index: int
    stats: dict[str, Any]
    where: str = ""  # node (Ray) or pid (process) of the attempt that finished


@dataclass(frozen=True)
class ShardFailed:
    """A shard that stopped with an error; its finished rows stay in its journal for the next run."""

    index: int
    reason: str
    hint: str | None = None


ShardOutcome = ShardDone | ShardFailed


def check_visible(config: GenerateConfig, marker: str, token: str, where: str) -> None:
    """In a shard on another node: the output directory, prompts
    and fleet state must be the driver's (shared storage)."""
    outdir = Path(config.output_dir)
    try:
        seen = (outdir / marker).read_text()
    except OSError:
        seen = None
    if seen != token:
        raise OutputError(
            f"output directory {outdir} is not shared with {where}: it does not hold the file {marker} the driver "
            "wrote",
            hint="put -o on storage every Ray node mounts at the same path (NFS, Lustre, ...)",
        )
    if not Path(config.prompts).is_file():
        raise InputError(
            f"prompt file {config.prompts} is not visible on {where}",
            hint="put the prompts on storage every Ray node mounts at the same path",
        )
    if config.fleet_state is not None:
        read_state(config.fleet_state)  # a clear FleetError when the node cannot read it
