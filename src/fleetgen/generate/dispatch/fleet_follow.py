"""Follow the fleet state while a job runs, so a replica replaced on a new address joins the job.

A supervisor (`fleetgen run`, or one the user runs) restarts a dead replica in place on a local
fleet, but on Ray the replacement lands wherever the cluster has room, with a new endpoint. The
job would otherwise keep probing the dead address until it was resumed.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from fleetgen.errors import FleetgenError
from fleetgen.fleet.state import read_state, state_path
from fleetgen.generate.config.partition import Shard
from fleetgen.generate.dispatch.dispatcher import Dispatcher

log = logging.getLogger(__name__)

POLL_S = 2.0


async def follow_fleet(state_dir: Path, dispatcher: Dispatcher, mine: Shard = Shard(), poll_s: float = POLL_S) -> None:
    """Until cancelled: on each change of the state file, point each
    replica (of `mine`, its slice) at its endpoint once verified."""
    path = state_path(state_dir)
    seen: int | None = None
    told_size = False
    while True:
        await asyncio.sleep(poll_s)
        try:
            mtime = path.stat().st_mtime_ns
        except OSError:
            continue  # mid-rewrite, or the fleet was taken down: the dispatcher copes with dead replicas
        if mtime == seen:
            continue
        seen = mtime
        try:
            replicas = mine.of((await asyncio.to_thread(read_state, state_dir)).replicas)
        except FleetgenError:
            continue
        for position, r in enumerate(replicas[: len(dispatcher.replicas)]):
            # A replacement is written once when launched and again when verified: wait for the second.
            if r.verified and dispatcher.replace_endpoint(position, r.endpoint):
                log.info(f"replica {r.index} was replaced; new requests go to {r.endpoint}")
        if len(replicas) != len(dispatcher.replicas) and not told_size:
            told_size = True
            log.info(
                f"the fleet now has {len(replicas)} replicas, this run keeps its {len(dispatcher.replicas)}; "
                "stop it (Ctrl-C) and run the same command to resume on all of them"
            )
