"""A command's options generated from a config model's sections, one --help panel each (vLLM's EngineArgs.add_cli_args).

Each field gets one flag named after it (its flat name: `--max-attempts`, `--warmup-timeout-s`), with the
field's type, default, description and vocabulary read from cli/_fields.py (so building the options imports
no pydantic). A command names only where a flag differs: another name (`--output` for output_dir), more
typer.Option arguments (an environment variable), or no flag at all.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import typer

from fleetgen.cli._config import default, field_help

F = TypeVar("F", bound=Callable[..., Any])

_TYPES: dict[str, Any] = {"int": int, "float": float, "str": str, "bool": bool, "path": Path, "list": list[str]}


@dataclass(frozen=True)
class Flag:
    """Where a field's flag is not the plain one: its names (the first one long), more typer.Option arguments."""

    decls: tuple[str, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)

    def param(self, flat: str) -> str:
        """The option's parameter name: its long flag's, or the field's flat name."""
        return self.decls[0].lstrip("-").replace("-", "_") if self.decls else flat


def generated_options(
    model: str, flags: Mapping[str, Flag], leave_out: Collection[str] = ()
) -> dict[str, inspect.Parameter]:
    """Flat field name -> the typer option that sets it, for every field of `model` with a flag kind."""
    from fleetgen.cli._fields import FIELDS, OPTIONS

    out: dict[str, inspect.Parameter] = {}
    for flat, kind, metavar, panel in OPTIONS[model]:
        if not kind or flat in leave_out:
            continue
        flag = flags.get(flat, Flag())
        if FIELDS[model][flat][0] is ...:
            value: Any = ...  # required
        else:
            value = None if kind == "list" else default(model, flat)  # an unset repeatable option: the field's []
        annotation = _TYPES[kind] if value is not None else _TYPES[kind] | None
        decls = flag.decls or ((f"--{flat.replace('_', '-')}",) if kind == "bool" and value is False else ())
        option = typer.Option(
            value, *decls, help=field_help(model, flat), metavar=metavar, rich_help_panel=panel, **flag.extra
        )
        out[flat] = inspect.Parameter(
            flag.param(flat), inspect.Parameter.KEYWORD_ONLY, default=option, annotation=annotation
        )
    return out


def with_parameters(fn: F, params: list[inspect.Parameter]) -> F:
    """`fn(**kwargs)` as typer reads a command: these parameters, in this order (--help lists them so)."""
    fn.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    fn.__annotations__ = {p.name: p.annotation for p in params}
    return fn
