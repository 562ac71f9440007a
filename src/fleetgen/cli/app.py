"""The root `fleetgen` command; each stage registers its subcommands from its own module."""

from __future__ import annotations

import typer

from fleetgen.cli import doctor as _doctor
from fleetgen.cli import export as _export
from fleetgen.cli import fleet as _fleet
from fleetgen.cli import generate as _generate
from fleetgen.cli import mix as _mix
from fleetgen.cli import model as _model
from fleetgen.cli import plan as _plan
from fleetgen.cli import report as _report
from fleetgen.cli import run as _run
from fleetgen.cli._errors import run_guarded

app = typer.Typer(
    name="fleetgen",
    help="Regenerate large synthetic datasets with a target model on a fleet of inference servers.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

_model.register(app)
_fleet.register(app)
_doctor.register(app)
_mix.register(app)
_generate.register(app)
_export.register(app)
_report.register(app)
_run.register(app)
_plan.register(app)

# Command name -> which config fields its options set (docs/config-reference.md and the defaults test read it).
BINDINGS = {
    **_fleet.BINDINGS, **_doctor.BINDINGS, **_mix.BINDINGS, **_generate.BINDINGS, **_export.BINDINGS, **_run.BINDINGS,
}


def main() -> None:
    run_guarded(app)


if __name__ == "__main__":
    main()
