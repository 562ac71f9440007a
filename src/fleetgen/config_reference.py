"""docs/config-reference.md from the pydantic tree: every field of a `fleetgen run` job file and the flag that sets it.

Run `python -m fleetgen.config_reference > docs/config-reference.md`; tests/test_config_reference.py fails when
the committed page differs from what this prints. Types, defaults and descriptions are the models' own, and the
flags are read from the CLI's commands (fleetgen.cli.app.bindings()), so the page cannot list a flag that is gone.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from types import NoneType, UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, SecretStr

COMMAND = "python -m fleetgen.config_reference > docs/config-reference.md"


@dataclass(frozen=True)
class Section:
    """One table of the page: the fields of `model`, found at YAML `path` (`generate`, `mix.sources[]`)."""

    path: str
    model: type[BaseModel]
    about: str


def _section_model(annotation: Any) -> tuple[type[BaseModel], str] | None:
    """The model a field holds (`X`, `X | None`, `list[X]`) and the path suffix of one item (`[]`)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, ""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin in (Union, UnionType):
        found = [m for a in args if a is not NoneType and (m := _section_model(a))]
        return found[0] if len(found) == 1 else None
    if origin is list and args:
        inner = _section_model(args[0])
        return (inner[0], "[]" + inner[1]) if inner else None
    return None


def sections(root: type[BaseModel], path: str = "", about: str = "") -> list[Section]:
    """`root` and every model under it, depth first, in field order."""
    out = [Section(path, root, about)]
    for name, f in root.model_fields.items():
        inner = _section_model(f.annotation)
        if inner:
            out += sections(inner[0], f"{path}.{name}{inner[1]}".lstrip("."), f.description or "")
    return out


def type_name(annotation: Any) -> str:
    """A field's type in YAML words: `save | strip | off`, `int or
    auto`, `list[str]`, `path or null`; a section is a mapping."""
    if annotation is NoneType:
        return "null"
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:  # a value with its own parser (i/N)
        return type_name(args[0])
    if origin is Literal:
        return " | ".join(str(a) for a in args)
    if origin in (Union, UnionType):
        return " or ".join(type_name(a) for a in args)
    if origin in (list, dict):
        return f"{origin.__name__}[{', '.join(type_name(a) for a in args)}]"
    if isinstance(annotation, type):
        if issubclass(annotation, BaseModel):
            return "mapping"
        if issubclass(annotation, Path):
            return "path"
        if issubclass(annotation, SecretStr):
            return "secret str"
        return getattr(annotation, "METAVAR", None) or annotation.__name__
    return str(annotation).replace("typing.", "")


def default_text(f: Any) -> str:
    """The default as it would be written in YAML, or `required`."""
    if f.is_required():
        return "required"
    v = f.get_default(call_default_factory=True)
    if isinstance(v, BaseModel):
        return "its fields' defaults"
    if v is None:
        return "`null`"
    if isinstance(v, bool):
        return f"`{str(v).lower()}`"
    if isinstance(v, (list, dict)):
        return f"`{json.dumps(v)}`"
    return f"`{v}`"


def flags_by_field() -> dict[tuple[type[BaseModel], str], list[str]]:
    """(model, field) -> the `command --flag` texts that set it, read from the CLI's click commands; the model is
    the one that declares the field (a section, for a flag named after a field of generate's sections)."""
    from fleetgen.cli.app import all_commands, bindings
    from fleetgen.cli.field_table import leaves

    commands = all_commands()
    out: dict[tuple[type[BaseModel], str], list[str]] = {}
    for command, binding in bindings().items():
        for p in commands[command].params:
            name = binding.field_for(p.name)
            if name is None or getattr(p, "hidden", False):
                continue
            if p.param_type_name == "argument":
                flag = p.name.upper()
            else:
                flag = "/".join([max(p.opts, key=len), *p.secondary_opts])
            _, owner, field = leaves(binding.model)[name]
            out.setdefault((owner, field), []).append(f"`{command} {flag}`")
    return out


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def render(root: type[BaseModel] | None = None) -> str:
    if root is None:
        from fleetgen.run.config import JobConfig

        root = JobConfig
    flags = flags_by_field()
    lines = [
        "# Config reference",
        "",
        f"Generated from the config models by `{COMMAND}`; do not edit by hand (a test fails when it is stale).",
        "",
        "Every field of a `fleetgen run JOB.yaml` job file, section by section. The sections are also what the",
        "stages read on their own: `fleet` is the `--config` file of `fleetgen up`, `generate` the `--config` file of",
        "`fleetgen generate` (there `prompts` and `output_dir` are required and the fleet comes from `--fleet` or",
        "`--endpoint`), `mix` the recipe of `fleetgen mix`, `doctor` and `export` the flags of `fleetgen doctor` and",
        "`fleetgen export`. **CLI flag** names the command and flag that set the same field; *YAML only* means no",
        "flag does; — is a section, its fields follow. `[]` in a path is an item of a list. A field of a section of",
        "`generate` may also be written flat, by the name its flag has (`generate.max_attempts`, `generate.warmup:",
        "false`, `generate.warmup_timeout_s`), as job files written before the sections were.",
        "",
    ]
    for s in sections(root):
        title = f"`{s.path}`" if s.path else "Top level"
        lines += [f"## {title}", ""]
        if s.about:
            lines += [_cell(s.about), ""]
        lines += ["| YAML path | type | default | CLI flag | description |", "|---|---|---|---|---|"]
        for name, f in s.model.model_fields.items():
            path = f"{s.path}.{name}" if s.path else name
            found = [
                t
                for (model, field), texts in flags.items()
                if field == name and issubclass(s.model, model)
                for t in texts
            ]
            flag = "—" if _section_model(f.annotation) else ", ".join(found) or "*YAML only*"
            lines.append(
                f"| `{path}` | {_cell(type_name(f.annotation))} | {_cell(default_text(f))} | {flag} | "
                f"{_cell(f.description or '')} |"
            )
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    sys.stdout.write(render())


if __name__ == "__main__":
    main()
