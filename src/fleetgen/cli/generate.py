"""`fleetgen generate`: parse flags into a GenerateConfig, call the library, show progress and a summary."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
import yaml
from rich.console import Console
from rich.table import Table

from fleetgen.cli._config import Binding, field_help, typed
from fleetgen.cli._options import Flag, generated_options, with_parameters
from fleetgen.cli._wide import print_whole
from fleetgen.errors import ConfigError
from fleetgen.rows.stats_file import describe_freezes, describe_silence
from fleetgen.rows.token_ids import MISSING

if TYPE_CHECKING:
    # The config and the runner (aiohttp, the journal) load when the command runs: --help reads cli/_fields.py.
    from fleetgen.generate import GenerateConfig, ShardedRun, Stats

console = Console(stderr=True)

G = "GenerateConfig"
# Where a flag is not its field's plain one (the rest: cli/_options.py makes `--<flat name>` of every field).
FLAGS = {
    "output_dir": Flag(("--output", "-o")),
    "fleet_state": Flag(("--fleet",)),
    "endpoints": Flag(("--endpoint",)),
    "api_key": Flag(("--api-key",), {"envvar": "FLEETGEN_API_KEY", "show_envvar": True}),
}
# prompts is the command's argument; lease_group is set by `--shards` for each shard it starts, never by hand.
NO_FLAG = ("prompts", "lease_group")
OPTIONS = generated_options(G, FLAGS, leave_out=NO_FLAG)
FIELD_OF = {param.name: flat for flat, param in OPTIONS.items()}  # option -> the field it sets (a flat name)
BINDINGS = {"generate": Binding(G, {k: v for k, v in FIELD_OF.items() if k != v}, derived={"profiles": "profiles"})}


def cmd_generate(ctx: typer.Context, prompts: Path, profiles: Path | None, config: Path | None, **flags: Any) -> None:
    """Regenerate the assistant turns of every prompt across the fleet, exactly once per (prompt, sample)."""
    from fleetgen.config import read_yaml_mapping, validate
    from fleetgen.generate.config import GenerateConfig

    given = {FIELD_OF[name]: value for name, value in flags.items() if typed(ctx, name)}
    given.update(prompts=prompts, **({"profiles": read_profiles(profiles)} if profiles is not None else {}))
    data = GenerateConfig.overlay(read_yaml_mapping(config) if config else {}, given)  # flags typed win over the file
    run_generate(validate(GenerateConfig, data, source=f"{config} and flags" if config else "flags"))


def run_generate(cfg: GenerateConfig) -> None:
    """Run the job (all its shards with --shards N), with a progress bar on a terminal and a summary after."""
    if cfg.sharding.shards is not None:
        from fleetgen.generate.shards.run import run_shards

        sharded = run_shards(cfg)
        _print_shards(sharded, cfg.output_dir)
        if sharded.interrupted:
            raise typer.Exit(130)
        return
    stats = _run_with_progress(cfg)
    print_summary(stats, cfg.output_dir)
    if stats.interrupted:
        raise typer.Exit(130)


with_parameters(
    cmd_generate,
    [
        inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context),
        inspect.Parameter(
            "prompts",
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            annotation=Path,
            default=typer.Argument(..., help=field_help(G, "prompts")),
        ),
        *OPTIONS.values(),
        inspect.Parameter(
            "profiles",
            inspect.Parameter.KEYWORD_ONLY,
            annotation=Path | None,
            default=typer.Option(
                None,
                "--profiles",
                help="YAML or JSON file holding the profiles list. " + field_help(G, "profiles"),
                rich_help_panel="Sampling",
            ),
        ),
        inspect.Parameter(
            "config",
            inspect.Parameter.KEYWORD_ONLY,
            annotation=Path | None,
            default=typer.Option(
                None, help="YAML file with a generate config (any field, flat or in sections); flags given override it."
            ),
        ),
    ],
)


def read_profiles(path: Path) -> list:
    """The `profiles` field from a file: a list of profiles, or a mapping with a `profiles` list (JSON is YAML)."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"--profiles {path}: cannot read it: {e.strerror}", hint="check the path") from None
    except yaml.YAMLError as e:
        raise ConfigError(
            f"--profiles {path}: not valid YAML or JSON: {e}", hint="fix the syntax at the place named"
        ) from None
    if isinstance(data, dict) and "profiles" in data:
        data = data["profiles"]
    if not isinstance(data, list):
        raise ConfigError(
            f"--profiles {path}: expected a list of profiles (or a mapping with `profiles:`), got "
            f"{type(data).__name__}",
            hint="write `- {name: cold, temperature: 0.3}` lines, one per profile",
        )
    return data


def _run_with_progress(cfg: GenerateConfig) -> Stats:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from fleetgen.generate.runner import generate

    if not sys.stderr.isatty():
        return generate(cfg)
    columns = (
        TextColumn("[bold]generate"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        TextColumn("{task.fields[load]}"),
    )
    with Progress(*columns, console=console, refresh_per_second=2) as progress:
        task = progress.add_task("generate", total=None, rate="", load="")

        def on_progress(s: Stats) -> None:
            load = " ".join(
                f"r{r.index}:{r.outstanding}/{r.window}"
                + ("" if r.in_rotation else "[yellow]…[/]" if r.warming else "[red]✗[/]")
                for r in s.replicas
            )
            progress.update(
                task, total=max(s.total, s.done), completed=s.done, rate=f"{s.output_tokens_per_s:.0f} tok/s", load=load
            )

        return generate(cfg, on_progress=on_progress)


def print_summary(s: Stats, outdir: Path) -> None:
    t = Table(title=f"generate: {outdir}")
    for col in (
        "",
        "ok",
        "errors / 4xx",
        "truncated",
        "out tokens",
        "tok/s",
        "requests",
        "failures",
        "stalled",
        "frozen",
        "hedges",
        "moved",
    ):
        t.add_column(col, justify="right")
    for r in s.replicas:
        rate = r.completion_tokens / s.elapsed_s if s.elapsed_s else 0
        t.add_row(
            f"replica {r.index}",
            str(r.ok),
            str(r.rejected),
            "",
            str(r.completion_tokens),
            f"{rate:.1f}",
            str(r.requests),
            str(r.failures),
            str(r.stalled),
            str(r.freeze_count),
            str(r.hedges),
            str(r.moved),
        )
    t.add_row(
        "[bold]total",
        str(s.ok),
        str(s.errors),
        str(s.truncated),
        str(s.completion_tokens),
        f"{s.output_tokens_per_s:.1f}",
        "",
        "",
        "",
        "",
        "",
        "",
    )
    print_whole(console, t)
    for r in s.replicas:
        if (gone := s.stopped_answering(r)) is not None:
            console.print(f"[yellow]replica {r.index} ({r.endpoint}) stopped answering[/] {describe_silence(gone)}")
        if r.freeze_count:
            console.print(f"[yellow]replica {r.index} ({r.endpoint})[/] {describe_freezes(s.frozen(r))}")
    for f in s.fleet_silences:
        end = f"until {s.run_time(f['ended_at']):.1f}s" if f["ended_at"] is not None else "to the end"
        console.print(
            f"[yellow]every replica was silent[/] from {s.run_time(f['at']):.1f}s {end} (replicas "
            f"{', '.join(map(str, f['replicas']))}): the job's problem, not one replica's; none was taken out"
        )
    tail = f"wall {s.elapsed_s:.1f}s; {s.resumed} already done before this run"
    if s.stopped_reason:
        tail += f"; {s.stopped_reason}"
    if s.turns_without_ids:
        why = ", ".join(f"{MISSING[k]} {n}" for k, n in sorted(s.ids_missing.items()))
        tail += f"; {s.turns_without_ids} turns without token ids ({why}; the tokens export re-tokenizes those rows)"
    console.print(tail + f"; stats in {outdir / 'stats.json'}")


def _print_shards(run: ShardedRun, outdir: Path) -> None:
    from fleetgen.generate import ShardDone

    t = Table(
        title=f"generate: {outdir} ({len(run.outcomes)} shards as "
        f"{'Ray tasks' if run.runner == 'ray' else 'processes'})"
    )
    for col in ("shard", "ran on", "ok", "errors", "resumed", "out tokens", "wall s"):
        t.add_column(col, justify="right")
    for o in run.outcomes:
        if isinstance(o, ShardDone):
            rows = o.stats["rows"]
            t.add_row(
                str(o.index),
                o.where,
                str(rows["ok"]),
                str(rows["errors"]),
                str(rows["resumed"]),
                str(o.stats["tokens"]["completion"]),
                f"{o.stats['wall_s']:.1f}",
            )
    s = run.stats
    t.add_row(
        "[bold]total",
        "",
        str(s["rows"].get("ok", 0)),
        str(s["rows"].get("errors", 0)),
        str(s["rows"].get("resumed", 0)),
        str(s["tokens"].get("completion", 0)),
        f"{s['wall_s']:.1f}",
    )
    print_whole(console, t)
    console.print(f"one output: export and report read every shard's files in {outdir}")


def register(app: typer.Typer) -> None:
    app.command("generate")(cmd_generate)
