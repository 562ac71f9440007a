"""Flags over a YAML file: one rule for every command that takes `--config`; flags read from the config models.

A flag's help, vocabulary and default are its config field's (description, Literal type, default), so
`--help`, the YAML and docs/config-reference.md cannot drift apart; `Binding` records which option
sets which field, for the reference page and the test that holds the defaults equal.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

import typer
from pydantic import BaseModel

from fleetgen.config import read_yaml_mapping


def merge_flags(
    ctx: typer.Context, flags: dict[str, object], yaml_path: Path | None, field_of: Mapping[str, str] | None = None
) -> dict[str, object]:
    """Flags the user typed win over the file; a flag's default fills only what the file leaves out."""
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


def literal_values(annotation: Any) -> tuple[Any, ...]:
    """The words of a Literal annotation, also inside `X | None` or `int | Literal[...]`; () if it has none."""
    if get_origin(annotation) is Literal:
        return get_args(annotation)
    if get_origin(annotation) in (Union, UnionType):
        return tuple(v for arm in get_args(annotation) for v in literal_values(arm))
    return ()


def choices(model: type[BaseModel], name: str) -> str:
    """The field's vocabulary as a metavar, `a|b|c`, for `--help`; the config model still refuses other words.

    The option stays a string: a wrong word gets the same one-line error and hint as in a YAML file.
    """
    values = literal_values(model.model_fields[name].annotation)
    if not values:
        raise TypeError(f"{model.__name__}.{name} is not typed Literal[...]")
    return "|".join(str(v) for v in values)


def default(model: type[BaseModel], name: str) -> Any:
    """The field's default, for the option's: `--help` shows the config's own default, never a copy."""
    f = model.model_fields[name]
    if f.is_required():
        raise TypeError(f"{model.__name__}.{name} has no default")
    return f.get_default(call_default_factory=True)


@dataclass(frozen=True)
class Binding:
    """Which config fields the options of one command set.

    An option sets the field of its own name, or the one `field_of` names. `derived` options set a field
    through a conversion (a file holding it, `eval=F`): their default is no field value. `overrides` are
    options whose None means "keep what the file says" (commands that read a YAML file first).
    """

    model: type[BaseModel]
    field_of: Mapping[str, str] = field(default_factory=dict)
    derived: Mapping[str, str] = field(default_factory=dict)
    overrides: frozenset[str] = frozenset()

    def field_for(self, option: str) -> str | None:
        """The field option `option` (its parameter name) sets, or None."""
        name = self.derived.get(option) or self.field_of.get(option, option)
        return name if name in self.model.model_fields else None
