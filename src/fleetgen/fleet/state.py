"""The fleet's state on disk: what `up` started, read by `status`, `down`, `generate` and `run`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError

from fleetgen.atomic import write_atomic
from fleetgen.errors import FleetError
from fleetgen.fleet.state_file import UNREADABLE_HINT, read_state_json, state_path  # noqa: F401 (state_path: re-exported)


class GpuShare(BaseModel):
    """The memory the first replica of a shared GPU took, which each replica of that GPU is given
    (fleet/equal_memory.py)."""

    static_bytes: int = Field(description="Its fraction x the GPU memory free as it started: weights + KV pool.")
    kv_tokens: int | None = Field(None, description="Its KV pool in tokens, as it reported it: the others' cap.")


class ReplicaState(BaseModel):
    index: int
    endpoint: str
    pid: int
    create_time: float = Field(description="Process start time; tells a live replica from a reused pid.")
    boot_time: float | None = Field(
        None,
        description="The node's boot time as create_time was read: with it, "
        "a step of the wall clock (suspend, a paused VM) does not hide a live replica.",
    )
    engine: str
    model: str
    served_model_name: str
    gpus: list[int] = Field(default_factory=list)
    cpus: list[int] = Field(default_factory=list)
    log_path: str
    command: list[str]
    node: str | None = Field(None, description="The node the replica runs on (its IP on a Ray cluster).")
    node_id: str | None = Field(None, description="Ray's id of that node (Ray fleets).")
    actor: str | None = Field(None, description="Name of the Ray actor that owns the server (Ray fleets).")
    effective_config: dict[str, object] = Field(default_factory=dict)
    startup_timings: dict[str, float] = Field(
        default_factory=dict, description="Seconds the engine logged for start-up steps (e.g. cuda graph capture)."
    )
    gpu_share: GpuShare | None = Field(
        None, description="Where replicas share a GPU and the engine sizes from free memory: what each is given."
    )

    @property
    def verified(self) -> bool:
        """Passed readiness. A replica is recorded before that, so `down` can clean a start cut short."""
        return bool(self.effective_config)


class FleetState(BaseModel):
    engine: str
    model: str
    served_model_name: str
    api_key_required: bool = False
    max_running_requests: int | None = None
    python: str | None = Field(None, description="Interpreter that runs the engine; restarts reuse it.")
    config: dict[str, object] = Field(default_factory=dict, description="The FleetConfig, API key excluded.")
    replicas: list[ReplicaState] = Field(default_factory=list)
    backend: Literal["local", "ray"] = Field("local", description="Where replicas run: processes here, or Ray actors.")
    ray_address: str | None = Field(None, description="The Ray cluster's GCS address (Ray fleets).")
    fleet_id: str | None = Field(None, description="Prefix of this fleet's Ray actor and placement group names.")

    @property
    def endpoints(self) -> list[str]:
        return [r.endpoint for r in self.replicas]


def ensure_state_dir(state_dir: Path) -> Path:
    """Create the state directory private to the user (0700): it holds logs and pids."""
    d = Path(state_dir)
    d.mkdir(parents=True, exist_ok=True)
    os.chmod(d, 0o700)
    (d / "logs").mkdir(exist_ok=True)
    return d


def write_state(state_dir: Path, state: FleetState) -> Path:
    """Write atomically so a reader never sees half a file."""
    path = state_path(state_dir)
    write_atomic(path, state.model_dump_json(indent=2))
    return path


def read_state(state_dir: Path, raw: dict | None = None) -> FleetState:
    """The fleet state; `raw`: the file's mapping where the caller already read it (read_state_json)."""
    try:
        return FleetState.model_validate(read_state_json(state_dir) if raw is None else raw)
    except ValidationError as e:
        raise FleetError(f"fleet state {state_path(state_dir)} is unreadable: {e}", hint=UNREADABLE_HINT) from None


def clear_state(state_dir: Path) -> None:
    state_path(state_dir).unlink(missing_ok=True)


def record_replica(state_dir: Path, replica: ReplicaState) -> None:
    """Put one replica into the state on disk; re-read before writing: several may be restarted at once."""
    state = read_state(state_dir)
    state.replicas[replica.index] = replica
    write_state(state_dir, state)
