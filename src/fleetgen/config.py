"""Loading the pydantic config tree from YAML, with errors that name the file and field."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from fleetgen.errors import ConfigError

T = TypeVar("T", bound=BaseModel)


class StrictModel(BaseModel):
    """Base for every config section: unknown keys are errors, not silently ignored."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


def format_validation_error(err: ValidationError, source: str) -> str:
    parts = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(top level)"
        parts.append(f"{loc}: {e['msg']}")
    return f"{source}: " + "; ".join(parts)


def read_yaml_mapping(path: str | Path) -> dict:
    """The YAML file as a mapping, unvalidated; errors name the file."""
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {p}", hint="check the path") from None
    except yaml.YAMLError as e:
        raise ConfigError(
            f"{p}: not valid YAML: {e}", hint="fix the YAML syntax at the line and column named above"
        ) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{p}: expected a mapping at the top level, got {type(data).__name__}",
            hint="write the config as `field: value` lines (see `--help` for the fields)",
        )
    return data


def load_yaml(path: str | Path, model: type[T]) -> T:
    """Read a YAML file into `model`; every problem is a ConfigError naming the file and field."""
    return validate(model, read_yaml_mapping(path), source=str(path))


def validate(model: type[T], data: dict, *, source: str) -> T:
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise ConfigError(format_validation_error(e, source), hint="fix the field named above") from None
