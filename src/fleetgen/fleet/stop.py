"""`down`: stop every replica of a fleet and forget it; safe to run twice."""

from __future__ import annotations

from pathlib import Path

from fleetgen.errors import FleetError
from fleetgen.fleet.state_file import read_state_json


def down(state_dir: Path, *, grace_s: float = 20.0) -> int:
    """Returns how many processes were stopped; 0 when there was no fleet (or no state it can read)."""
    try:
        raw = read_state_json(state_dir)  # no fleet: done before the state models and a backend load
        from fleetgen.fleet.state import read_state

        state = read_state(state_dir, raw)
    except FleetError:
        return 0
    from fleetgen.fleet.backend_lookup import backend_for
    from fleetgen.fleet.state import clear_state

    stopped = backend_for(state).stop(state, grace_s)
    clear_state(state_dir)
    return stopped
