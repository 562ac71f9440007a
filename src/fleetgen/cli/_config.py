"""Flags over a YAML file: one rule for every command that takes `--config`."""

from __future__ import annotations

from pathlib import Path

import typer

from fleetgen.config import read_yaml_mapping


def merge_flags(
    ctx: typer.Context, flags: dict[str, object], yaml_path: Path | None, field_of: dict[str, str] | None = None
) -> dict[str, object]:
    """Flags the user typed win over the file; a flag's default fills only what the file leaves out."""
    data = read_yaml_mapping(yaml_path) if yaml_path else {}
    field_of = field_of or {}
    for name, value in flags.items():
        field = field_of.get(name, name)
        source = ctx.get_parameter_source(name)  # typer ships its own click: compare by name
        typed = source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")
        if typed or field not in data:
            data[field] = value
    return data
