"""The doctor's outcome types: one Check per finding, a Fix it proposes, the whole DoctorReport.

The JSON form (`DoctorReport.model_dump_json`) is a public contract documented in docs/doctor.md;
bump SCHEMA_VERSION on any change that removes or renames a field.
"""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Status(str, Enum):
    """How one check came out; ordered from best to worst by `severity`."""

    OK = "ok"
    SKIP = "skip"
    WARN = "warn"
    FAIL = "fail"

    @property
    def severity(self) -> int:
        return {"ok": 0, "skip": 0, "warn": 1, "fail": 2}[self.value]


class Fix(_Frozen):
    """What would make a check pass; `--fix DIR` applies the env, prepend, overlay and engine-args parts."""

    summary: str = Field(description="One line saying what the fix does.")
    env: dict[str, str] = Field(default_factory=dict, description="Variables to set.")
    prepend: dict[str, list[str]] = Field(
        default_factory=dict, description="Path-like variables (PATH, LD_LIBRARY_PATH) and the dirs to put first."
    )
    overlay: bool = Field(
        False,
        description="Needs the CUDA_HOME overlay: CUDA_HOME/CUDA_PATH point at DIR/cuda, DIR/cuda/bin goes on PATH.",
    )
    engine_args: list[str] = Field(default_factory=list, description="Flags to pass to the engine.")
    commands: list[str] = Field(
        default_factory=list, description="Commands for the user to run (package changes); fleetgen never runs them."
    )


class Check(_Frozen):
    """One finding: a stable id, how it came out, why, and the fix where there is one."""

    id: str = Field(description="Stable dotted id, e.g. 'toolchain.nvcc'.")
    status: Status
    summary: str = Field(description="One line for humans.")
    cause: str | None = Field(None, description="Stable machine code of the problem, e.g. 'torch_abi_mismatch'.")
    evidence: dict[str, object] = Field(default_factory=dict, description="What was looked at and seen.")
    fix: Fix | None = None


class OverlayPlan(_Frozen):
    """A CUDA_HOME made of symlinks: the listed dirs' entries are linked in, then `links` on top."""

    mirror: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Overlay subdir ('' is the root) -> source dirs whose entries are linked into it; first wins.",
    )
    links: dict[str, str] = Field(
        default_factory=dict, description="Overlay-relative path -> absolute target; overrides mirrored entries."
    )


class DoctorReport(_Frozen):
    """Everything one `fleetgen doctor` run found."""

    schema_version: int = SCHEMA_VERSION
    engine: str | None = Field(None, description="The engine checked, or null when none was asked for.")
    python: str = Field(description="The interpreter whose torch and kernels were checked.")
    checks: list[Check]
    overlay: OverlayPlan | None = Field(
        None, description="The CUDA_HOME overlay `--fix` would build, if one is needed."
    )

    @property
    def status(self) -> Status:
        """The worst status of any check (skip counts as ok)."""
        worst = Status.OK
        for c in self.checks:
            if c.status.severity > worst.severity:
                worst = c.status
        return worst

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.status is Status.FAIL]

    def get(self, check_id: str) -> Check | None:
        return next((c for c in self.checks if c.id == check_id), None)
