"""Flags over a YAML file: one rule for every command that takes `--config`; flags read from the config models.

A flag's help, vocabulary and default are its config field's (description, Literal type, default), so
`--help`, the YAML and docs/config-reference.md cannot drift apart; `Binding` records which option
sets which field, for the reference page and the test that holds the defaults equal. They are read from
cli/_fields.py, a table generated from the models (cli/field_table.py), so that building a command's
options imports neither pydantic nor the config tree.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from pydantic import BaseModel
    from pydantic.fields import FieldInfo


def merge_flags(
    ctx: typer.Context, flags: dict[str, object], yaml_path: Path | None, field_of: Mapping[str, str] | None = None
) -> dict[str, object]:
    """Flags the user typed win over the file; a flag's default fills only what the file leaves out."""
    from fleetgen.config import read_yaml_mapping

    data = read_yaml_mapping(yaml_path) if yaml_path else {}
    field_of = field_of or {}
    for name, value in flags.items():
        key = field_of.get(name, name)
        if typed(ctx, name) or key not in data:
            data[key] = value
    return data


def typed(ctx: typer.Context, name: str) -> bool:
    """Whether the user gave option `name` (not its default)."""
    source = ctx.get_parameter_source(name)  # typer ships its own click: compare by name
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


def _field(model: str, name: str) -> tuple[Any, str, tuple[Any, ...]]:
    """(default, help, Literal words) of config field `model.name`, from the generated table."""
    from fleetgen.cli._fields import FIELDS

    try:
        return FIELDS[model][name]
    except KeyError:
        raise KeyError(
            f"{model}.{name} is not in cli/_fields.py: run `python -m fleetgen.cli.field_table "
            "> src/fleetgen/cli/_fields.py`"
        ) from None


def field_help(model: str, name: str) -> str:
    """The CLI help of a flag is the description of the field it maps onto."""
    return _field(model, name)[1]


def choices(model: str, name: str) -> str:
    """The field's vocabulary as a metavar, `a|b|c`, for `--help`; the config model still refuses other words.

    The option stays a string: a wrong word gets the same one-line error and hint as in a YAML file.
    """
    values = _field(model, name)[2]
    if not values:
        raise TypeError(f"{model}.{name} is not typed Literal[...]")
    return "|".join(str(v) for v in values)


def default(model: str, name: str) -> Any:
    """The field's default, for the option's: `--help` shows the config's own default, never a copy."""
    value = _field(model, name)[0]
    if value is ...:
        raise TypeError(f"{model}.{name} has no default a flag can take")
    return copy.deepcopy(value)  # a list or dict default is the option's own


@dataclass(frozen=True)
class Binding:
    """Which config fields the options of one command set.

    An option sets the field of its own name, or the one `field_of` names. `derived` options set a field
    through a conversion (a file holding it, `eval=F`): their default is no field value. `overrides` are
    options whose None means "keep what the file says" (commands that read a YAML file first).
    """

    model_name: str  # a key of cli/field_table.py's MODELS
    field_of: Mapping[str, str] = field(default_factory=dict)
    derived: Mapping[str, str] = field(default_factory=dict)
    overrides: frozenset[str] = frozenset()

    @property
    def model(self) -> type[BaseModel]:
        from fleetgen.cli.field_table import model_class

        return model_class(self.model_name)

    def field_info(self, name: str) -> FieldInfo:
        """The declaration of the field `name` (a flat name for a model in sections) of this binding's model."""
        from fleetgen.cli.field_table import field_info

        return field_info(self.model, name)

    def field_for(self, option: str) -> str | None:
        """The field option `option` (its parameter name) sets, or None."""
        from fleetgen.cli._fields import FIELDS

        name = self.derived.get(option) or self.field_of.get(option, option)
        return name if name in FIELDS[self.model_name] else None
