"""The root `fleetgen` command; each stage registers its subcommands from its own module.

A command's module is imported only when that command runs (or its own `--help` is shown): `fleetgen
status` does not build `generate`'s forty options from the config tree. `fleetgen --help` lists the
commands from `COMMANDS` alone; tests/test_cli_startup.py checks that table against the commands.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import os
import sys
from difflib import get_close_matches
from typing import TYPE_CHECKING, NamedTuple, NoReturn

import typer
from typer import _click  # typer's own click, whose UsageError its parser raises
from typer.core import TyperGroup

from fleetgen.cli._errors import run_guarded

if TYPE_CHECKING:
    import click

    from fleetgen.cli._config import Binding


class Entry(NamedTuple):
    module: str  # under fleetgen.cli; it has register(app) and, where options map onto config, BINDINGS
    summary: str  # the first line of the command's docstring, as `fleetgen --help` shows it


COMMANDS = {
    "up": Entry(
        "up", "Start a data-parallel fleet and return once every replica is verified. Engine flags go after `--`."
    ),
    "status": Entry(
        "fleet", "Show each replica (alive, healthy, latency, load, throughput, memory) and the jobs driving the fleet."
    ),
    "down": Entry("fleet", "Stop the fleet (SIGTERM, then SIGKILL after the grace period); safe to run twice."),
    "doctor": Entry("doctor", "Diagnose the GPU/CUDA/engine environment; exit 1 if any check fails."),
    "mix": Entry("mix", "Build a balanced, deduplicated prompt set from the recipe's datasets."),
    "generate": Entry(
        "generate",
        "Regenerate the assistant turns of every prompt across the fleet, exactly once per (prompt, sample).",
    ),
    "export": Entry(
        "export",
        "Write drafter-training data from a generate run: SpecForge/ShareGPT/OpenAI JSONL or token ids + loss mask.",
    ),
    "capture": Entry(
        "capture",
        "Capture the target's hidden states at a drafter's layers over each row's recorded ids, exactly once.",
    ),
    "report": Entry(
        "report", "Write a report of a generate run: mix, lengths, finish reasons, throughput, errors, with plots."
    ),
    "run": Entry("run", "Run doctor -> mix -> up -> generate -> down -> export -> report; resumable at every stage."),
    "plan": Entry(
        "plan", "Estimate the job's wall time and GPU-hours from a throughput, and the storage of capturing it."
    ),
    "model": Entry("model", "Prepare the embedded models."),
}


class LazyCommands(TyperGroup):
    """The root group: loads a command's module on first use; lists the commands from COMMANDS."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            self.load(COMMANDS[cmd_name].module)
        return self.commands.get(cmd_name)

    def resolve_command(self, ctx: click.Context, args: list[str]):
        try:
            return super().resolve_command(ctx, args)
        except _click.exceptions.UsageError as e:  # typer suggests from the loaded commands alone
            if args and "Did you mean" not in e.message and (near := get_close_matches(args[0], COMMANDS)):
                e.message = f"{e.message.rstrip('.')}. Did you mean {', '.join(map(repr, near))}?"
            raise

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The root's help: a name and its whole summary line (wrapped), nothing imported."""
        with formatter.section("Commands"):
            formatter.write_dl([(name, entry.summary) for name, entry in COMMANDS.items()])

    def load(self, module: str) -> None:
        """Every command `fleetgen.cli.<module>` registers, added to this group."""
        sub = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
        sub.callback()(lambda: None)  # a group even for a module of one command
        importlib.import_module(f"fleetgen.cli.{module}").register(sub)
        for name, cmd in typer.main.get_command(sub).commands.items():  # type: ignore[attr-defined]
            self.commands.setdefault(name, cmd)


app = typer.Typer(
    name="fleetgen",
    cls=LazyCommands,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # The root's help and usage errors in click's plain text: typer's rich help imports rich's markdown and
    # panels, a large part of `fleetgen --help` (BENCHMARKS.md, "figures
    # the code cites"). Each command's own `--help` keeps rich's panels.
    rich_markup_mode=None,
)


@app.callback()
def _root(
    quiet: bool = typer.Option(
        False, "--quiet", "-q", help="Warnings and errors only: no notes (a command's own output stays)."
    ),
    verbose: int = typer.Option(0, "--verbose", "-v", count=True, show_default=False, help="Debug lines too."),
) -> None:  # a group's callback; its docstring is the root's help
    """Regenerate large synthetic datasets with a target model on a fleet of inference servers."""
    from fleetgen.cli._logging import setup

    setup(quiet=quiet, verbose=verbose)


def _modules() -> list[str]:
    """The command modules, each once, in COMMANDS' order."""
    return list(dict.fromkeys(e.module for e in COMMANDS.values()))


def all_commands() -> dict[str, click.Command]:
    """Every command, loaded (for the config reference and the tests that walk all flags)."""
    group = typer.main.get_command(app)
    assert isinstance(group, LazyCommands)
    for module in _modules():
        group.load(module)
    return {name: group.commands[name] for name in COMMANDS}


def bindings() -> dict[str, Binding]:
    """Command name -> which config fields its options set (docs/config-reference.md and the defaults test read it)."""
    out: dict[str, Binding] = {}
    for module in _modules():
        out.update(getattr(importlib.import_module(f"fleetgen.cli.{module}"), "BINDINGS", {}))
    return out


def main() -> None:
    try:
        run_guarded(app)
    finally:
        # The process ends here: the interpreter's last collection pass walks every object left
        # (BENCHMARKS.md, "client at the null server"); they are freed all the same.
        gc.freeze()


def console_main() -> NoReturn:
    """The `fleetgen` command: main(), then an exit that skips the interpreter's teardown.

    The atexit handlers run and the output is flushed as in a normal exit; what is skipped is the module
    teardown, where triton's bindings (loaded with torch by a tokenizer or model load) print ~30 lines of
    `nanobind: leaked ...` after the command's last line. Nothing of fleetgen's is left to it.
    """
    code: object = 0
    try:
        main()
    except SystemExit as e:
        code = e.code
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`fleetgen ... | head`): nothing more can reach it
            pass
    os._exit(code or 0)


if __name__ == "__main__":
    console_main()
