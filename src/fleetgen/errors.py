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
