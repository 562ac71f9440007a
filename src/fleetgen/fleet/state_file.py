"""Where a fleet's state lives, and its raw JSON: read without the state models, so that `status` and
`down` of no fleet end before importing pydantic (issue 26: an instant CLI)."""

from __future__ import annotations

import json
from pathlib import Path

from fleetgen.errors import FleetError

STATE_FILE = "fleet.json"
UNREADABLE_HINT = "stop any replica of that fleet still running by its pid, then delete the file"


def state_path(state_dir: Path) -> Path:
    return Path(state_dir) / STATE_FILE


def read_state_json(state_dir: Path) -> dict:
    """The state file's mapping, unvalidated; a FleetError naming the directory when there is no fleet."""
    path = state_path(state_dir)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FleetError(
            f"no fleet state in {state_dir}", hint="start one with `fleetgen up`, or pass --state DIR"
        ) from None
    except (ValueError, UnicodeDecodeError) as e:
        raise FleetError(f"fleet state {path} is unreadable: {e}", hint=UNREADABLE_HINT) from None
    if not isinstance(data, dict):
        raise FleetError(f"fleet state {path} is unreadable: not a JSON object", hint=UNREADABLE_HINT)
    return data
