"""One exception tree for fleetgen; the CLI prints `message` on one line and `hint` below it."""

from __future__ import annotations


class FleetgenError(Exception):
    """Root of every error fleetgen raises on purpose."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message} (hint: {self.hint})"


class ConfigError(FleetgenError):
    """A config file, recipe or flag is invalid."""


class InputError(FleetgenError):
    """An input file (prompts, dataset) cannot be read as a whole."""


class OutputError(FleetgenError):
    """The output directory cannot be written (disk full, read-only, deleted); what is recorded stays valid."""


class DiskSpaceError(OutputError):
    """The output's disk cannot hold what a run will write (checked before it starts, unless forced)."""


class ModelError(FleetgenError):
    """A model name or path cannot be resolved or prepared."""


class FleetError(FleetgenError):
    """The fleet cannot be started, found or stopped."""


class PortInUseError(FleetError):
    """A port fleetgen wanted for a replica is already taken."""


class ReplicaStartError(FleetError):
    """A replica exited, logged a fatal line or made no progress while starting."""

    def __init__(self, message: str, *, hint: str | None = None, log_tail: str = "") -> None:
        super().__init__(message, hint=hint)
        self.log_tail = log_tail


class ConfigMismatchError(FleetError):
    """Replicas of one fleet report different models or configurations."""


class EngineError(FleetgenError):
    """An engine rejected its command line or answered outside its protocol."""


class ResumeMismatchError(FleetgenError):
    """An output directory belongs to a different job (model, sampling, prompt set)."""


class NoReplicaError(FleetgenError):
    """Every replica is gone; the job stops and can be resumed later."""


class MissingTokenIdsError(FleetgenError):
    """`--require-token-ids`: turns without the server's token ids; `turns` names each (id, sample, turn, reason)."""

    SHOWN = 10  # turns named in the message; `turns` keeps up to KEPT, `count` counts them all
    KEPT = 100

    def __init__(
        self, turns: list[tuple[str, int, int, str]], *, count: int | None = None, what: str, hint: str
    ) -> None:
        self.turns = turns[: self.KEPT]
        self.count = len(turns) if count is None else count
        self.what, self._hint = what, hint
        named = ", ".join(
            f"{rid}#{sample} turn {turn} ({reason})" for rid, sample, turn, reason in self.turns[: self.SHOWN]
        )
        more = f" and {self.count - self.SHOWN} more" if self.count > self.SHOWN else ""
        super().__init__(
            f"{what}: {self.count} turn(s) without token ids (--require-token-ids): {named}{more}", hint=hint
        )

    def merged(self, other: MissingTokenIdsError | None) -> MissingTokenIdsError:
        """This error and an earlier one (None: none) as one."""
        if other is None:
            return self
        return MissingTokenIdsError(
            other.turns + self.turns, count=other.count + self.count, what=other.what, hint=other._hint
        )


class LeaseHeldError(OutputError):
    """Another live process writes this output's journal: a second writer would append the same rows again."""


class LeaseLostError(OutputError):
    """This writer's lease on its journal was taken over (it was superseded): it stops instead of appending."""
