"""`fleetgen mix RECIPE.yaml -o prompts.jsonl|.parquet [--report DIR]`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from fleetgen.cli._config import Binding
from fleetgen.cli._config import field_help as _h
from fleetgen.errors import ConfigError

console = Console(stderr=True, highlight=False)
# --seed and --total change what the recipe says only when given.
BINDINGS = {"mix": Binding("MixRecipe", overrides=frozenset({"seed", "total"}))}


def cmd_mix(
    recipe: Annotated[Path | None, typer.Argument(help="Recipe YAML: sources, quotas, filters.")] = None,
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Output file: *.jsonl or *.parquet.")] = None,
    report: Annotated[
        Path | None, typer.Option("--report", help="Write report.md, summary.json and PNG charts here.")
    ] = None,
    seed: Annotated[int | None, typer.Option(help=_h("MixRecipe", "seed"))] = None,
    total: Annotated[int | None, typer.Option(help=_h("MixRecipe", "total"))] = None,
    exclude_unknown_license: Annotated[
        bool,
        typer.Option(
            "--exclude-unknown-license",
            help="Drop prompts whose license is unknown (sets filters.exclude_unknown_license).",
        ),
    ] = False,
    require_license: Annotated[
        list[str] | None,
        typer.Option(
            "--require-license",
            metavar="LICENSE",
            help="Keep only prompts under this license (repeatable; replaces filters.require_license), e.g. "
            "apache-2.0.",
        ),
    ] = None,
    list_adapters: Annotated[bool, typer.Option("--list-adapters", help="List the dataset adapters and exit.")] = False,
) -> None:
    """Build a balanced, deduplicated prompt set from the recipe's datasets."""
    from fleetgen.mix import ADAPTERS, build_mix, load_recipe

    if list_adapters:
        for name, cls in sorted(ADAPTERS.items()):
            typer.echo(f"{name:26} {cls.description} (needs: {', '.join(cls.required_columns)})")
        return
    if recipe is None or output is None:
        raise ConfigError("mix needs a recipe and an output", hint="fleetgen mix RECIPE.yaml -o prompts.jsonl")
    r = load_recipe(recipe)
    if seed is not None:
        r.seed = seed
    if total is not None:
        r.total = total
    if exclude_unknown_license or require_license:
        from fleetgen.config import validate
        from fleetgen.mix.recipe import FilterSpec

        flags = {"exclude_unknown_license": True} if exclude_unknown_license else {}
        if require_license:
            flags["require_license"] = require_license
        r.filters = validate(FilterSpec, {**r.filters.model_dump(), **flags}, source=f"{recipe} and flags")
    quiet = not console.is_terminal
    summary = build_mix(r, output, report, log=None if quiet else lambda m: console.print(f"[dim]{m}[/]"))

    t = Table(title=f"{summary.rows_written} prompts -> {summary.output}", title_justify="left")
    for col in ("domain", "quota", "target", "available", "written", "note"):
        t.add_column(col)
    for a in summary.domains:
        t.add_row(
            a.domain,
            f"{a.share:.2f}",
            f"{a.target:g}",
            f"{a.available:g}",
            str(summary.domains_selected.get(a.domain, 0)),
            a.note,
        )
    console.print(t)
    skipped = summary.rows_skipped
    if skipped:
        console.print(f"[yellow]{skipped} rows skipped[/] (reasons in the report/summary)")
    for note in summary.notes:
        console.print(f"[yellow]note:[/] {note}")
    if summary.report_dir:
        console.print(f"report: {summary.report_dir / 'report.md'}")


def register(app: typer.Typer) -> None:
    app.command("mix")(cmd_mix)
