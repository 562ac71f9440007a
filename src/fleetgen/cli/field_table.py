"""src/fleetgen/cli/_fields.py from the config models: each field's default, help and Literal words.

The CLI's options take their defaults, help and vocabularies from the config fields they set
(cli/_config.py). Reading them from the pydantic models at start-up imports pydantic and the config tree,
which costs more than all of `fleetgen status` or `down` (issue 26: an instant CLI); the table holds the
same values as plain Python. Run `python -m fleetgen.cli.field_table > src/fleetgen/cli/_fields.py` after
changing a model the CLI binds; tests/cli/test_field_table.py fails when the committed table differs.
"""

from __future__ import annotations

import importlib
from pathlib import PurePath
from types import NoneType, UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo

COMMAND = "python -m fleetgen.cli.field_table > src/fleetgen/cli/_fields.py"

# The models whose fields CLI options set, by the name cli modules use for them.
MODELS = {
    "CaptureConfig": "fleetgen.capture.config:CaptureConfig",
    "DoctorConfig": "fleetgen.doctor.config:DoctorConfig",
    "ExportConfig": "fleetgen.export.config:ExportConfig",
    "FleetConfig": "fleetgen.fleet.config:FleetConfig",
    "GenerateConfig": "fleetgen.generate.config:GenerateConfig",
    "MixRecipe": "fleetgen.mix.recipe:MixRecipe",
}


def model_class(name: str) -> type[BaseModel]:
    module, _, cls = MODELS[name].partition(":")
    return getattr(importlib.import_module(module), cls)


def leaves(model: type[BaseModel]) -> dict[str, tuple[str | None, type[BaseModel], str]]:
    """Flat name -> (section, the model that declares it, its field name): a model in sections (GenerateConfig's
    `flat_fields`) by the names its flags and flat YAML keys give its fields; any other model by its own fields."""
    flat = getattr(model, "flat_fields", None)
    if flat is None:
        return {name: (None, model, name) for name in model.model_fields}
    out: dict[str, tuple[str | None, type[BaseModel], str]] = {}
    for name, (section, field) in flat().items():
        owner = model if section is None else model.model_fields[section].annotation
        out[name] = (section, owner, field)  # type: ignore[assignment]
    return out


def field_info(model: type[BaseModel], name: str) -> FieldInfo:
    """The declaration of `model`'s field `name` (a flat name for a model in sections)."""
    _, owner, field = leaves(model)[name]
    return owner.model_fields[field]


# Option types a generated flag can have (cli/_options.py), by the annotation of its field.
_KINDS = {bool: "bool", int: "int", float: "float", str: "str", SecretStr: "str"}


def option_kind(annotation: Any) -> tuple[str, str | None]:
    """(kind, metavar) of the flag a field of this type gets; kind '' where it gets none (a list of models)."""
    args = (
        [a for a in get_args(annotation) if a is not NoneType] if get_origin(annotation) in (Union, UnionType) else []
    )
    if args and len(args) == 1:
        annotation = args[0]
    words = literal_values(annotation)
    if words:
        numbers = [a for a in args if a in (int, float)]
        return "str", "|".join([*map(str, words), *(["N"] if numbers else [])])
    if get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    if isinstance(annotation, type) and issubclass(annotation, PurePath):
        return "path", None
    if get_origin(annotation) is list and get_args(annotation) == (str,):
        return "list", None
    if annotation in _KINDS:
        return _KINDS[annotation], None
    if isinstance(annotation, type) and hasattr(annotation, "parse"):  # a value parsed from text (Shard: i/N)
        return "str", getattr(annotation, "METAVAR", None)
    return "", None


def literal_values(annotation: Any) -> tuple[Any, ...]:
    """The words of a Literal annotation, also inside `X | None` or `int | Literal[...]`; () if it has none."""
    if get_origin(annotation) is Literal:
        return get_args(annotation)
    if get_origin(annotation) in (Union, UnionType):
        return tuple(v for arm in get_args(annotation) for v in literal_values(arm))
    return ()


def _literal(value: Any) -> str | None:
    """`value` as Python source that rebuilds it, or None when it is no plain value (a nested model)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return repr(value)
    if isinstance(value, PurePath):
        return f"Path({str(value)!r})"
    if isinstance(value, list):
        items = [_literal(v) for v in value]
        return None if None in items else "[" + ", ".join(items) + "]"  # type: ignore[arg-type]
    if isinstance(value, dict):
        pairs = [(_literal(k), _literal(v)) for k, v in value.items()]
        return None if any(None in p for p in pairs) else "{" + ", ".join(f"{k}: {v}" for k, v in pairs) + "}"
    return None


def render() -> str:
    lines = [
        f'"""Generated by `{COMMAND}`; do not edit.',
        "",
        "Per config model, field -> (default, help, Literal words): by flat name for a model in sections",
        "(GenerateConfig). The default is ... where the field has none a flag could show (required, or a",
        "nested model). See fleetgen/cli/field_table.py for why.",
        '"""',
        "",
        "from pathlib import Path",
        "",
        "FIELDS = {",
    ]
    for name in MODELS:
        lines.append(f"    {name!r}: {{")
        for field in leaves(model_class(name)):
            info = field_info(model_class(name), field)
            default = None if info.is_required() else _literal(info.get_default(call_default_factory=True))
            words = tuple(literal_values(info.annotation))
            lines.append(f"        {field!r}: ({default or '...'}, {info.description or ''!r}, {words!r}),")
        lines.append("    },")
    lines += [
        "}",
        "",
        "# Per config model in sections: (flat name, option kind, metavar, help panel) of each field, in order; the",
        "# panel is its section's (None: the model's own fields). cli/_options.py makes a flag of each.",
        "OPTIONS = {",
    ]
    for name in MODELS:
        model = model_class(name)
        if not hasattr(model, "flat_fields"):
            continue
        lines.append(f"    {name!r}: (")
        for field, (section, owner, own) in leaves(model).items():
            kind, metavar = option_kind(owner.model_fields[own].annotation)
            panel = section.capitalize() if section else None
            lines.append(f"        ({field!r}, {kind!r}, {metavar!r}, {panel!r}),")
        lines.append("    ),")
    lines += ["}", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    print(render(), end="")
