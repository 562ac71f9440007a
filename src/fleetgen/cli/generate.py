"""`fleetgen generate`: parse flags into a GenerateConfig, call the library, show progress and a summary."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
import yaml
from rich.console import Console
from rich.table import Table

from fleetgen.cli._config import Binding, merge_flags
from fleetgen.cli._config import choices as _c
from fleetgen.cli._config import default as _d
from fleetgen.cli._config import field_help as _h
from fleetgen.cli._wide import print_whole
from fleetgen.config import validate
from fleetgen.errors import ConfigError

# Only the config and two light modules at module level: the runner (aiohttp, the journal) loads when the command runs.
from fleetgen.generate import GenerateConfig
from fleetgen.rows.stats_file import describe_silence
from fleetgen.rows.token_ids import MISSING

if TYPE_CHECKING:
    from fleetgen.generate import ShardedRun, Stats

console = Console(stderr=True)

G = "GenerateConfig"
# CLI flag -> config field, where the names differ.
_FIELD_OF = {"output": "output_dir", "fleet": "fleet_state", "endpoint": "endpoints"}
BINDINGS = {"generate": Binding(G, _FIELD_OF, derived={"profiles": "profiles"})}
# One panel of --help for the flags that split a job: --shards N runs all N here, --shard i/N is one of them.
_PARTS = "Partitioning"


def cmd_generate(
    ctx: typer.Context,
    prompts: Annotated[Path, typer.Argument(help=_h(G, "prompts"))],
    output: Annotated[Path, typer.Option("--output", "-o", help=_h(G, "output_dir"))],
    fleet: Annotated[Path | None, typer.Option("--fleet", help=_h(G, "fleet_state"))] = _d(G, "fleet_state"),
    endpoint: Annotated[list[str] | None, typer.Option("--endpoint", help=_h(G, "endpoints"))] = None,
    model: Annotated[str | None, typer.Option(help=_h(G, "model"))] = _d(G, "model"),
    samples: Annotated[int, typer.Option(help=_h(G, "samples"))] = _d(G, "samples"),
    max_tokens: Annotated[int, typer.Option(help=_h(G, "max_tokens"))] = _d(G, "max_tokens"),
    temperature: Annotated[float, typer.Option(help=_h(G, "temperature"))] = _d(G, "temperature"),
    top_p: Annotated[float, typer.Option(help=_h(G, "top_p"))] = _d(G, "top_p"),
    seed: Annotated[int | None, typer.Option(help=_h(G, "seed"))] = _d(G, "seed"),
    concurrency: Annotated[str, typer.Option(metavar="auto|N", help=_h(G, "concurrency"))] = _d(G, "concurrency"),
    profiles: Annotated[
        Path | None,
        typer.Option("--profiles", help="YAML or JSON file holding the profiles list. " + _h(G, "profiles")),
    ] = None,
    reasoning: Annotated[str, typer.Option(metavar=_c(G, "reasoning"), help=_h(G, "reasoning"))] = _d(G, "reasoning"),
    truncation: Annotated[str, typer.Option(metavar=_c(G, "truncation"), help=_h(G, "truncation"))] = _d(G, "truncation"),
    history_reasoning: Annotated[
        str, typer.Option(metavar=_c(G, "history_reasoning"), help=_h(G, "history_reasoning"))
    ] = _d(G, "history_reasoning"),
    tokenizer: Annotated[str | None, typer.Option(help=_h(G, "tokenizer"))] = _d(G, "tokenizer"),
    tool_match: Annotated[str, typer.Option(metavar=_c(G, "tool_match"), help=_h(G, "tool_match"))] = _d(G, "tool_match"),
    context_length: Annotated[int | None, typer.Option(help=_h(G, "context_length"))] = _d(G, "context_length"),
    dispatch: Annotated[str, typer.Option(metavar=_c(G, "dispatch"), help=_h(G, "dispatch"))] = _d(G, "dispatch"),
    prefix_affinity: Annotated[bool, typer.Option(help=_h(G, "prefix_affinity"))] = _d(G, "prefix_affinity"),
    prefix_routing: Annotated[bool, typer.Option(help=_h(G, "prefix_routing"))] = _d(G, "prefix_routing"),
    hedge: Annotated[bool, typer.Option(help=_h(G, "hedge"))] = _d(G, "hedge"),
    retry_errors: Annotated[bool, typer.Option("--retry-errors", help=_h(G, "retry_errors"))] = _d(G, "retry_errors"),
    token_ids: Annotated[bool, typer.Option(help=_h(G, "token_ids"))] = _d(G, "token_ids"),
    require_token_ids: Annotated[
        bool, typer.Option("--require-token-ids", help=_h(G, "require_token_ids"))
    ] = _d(G, "require_token_ids"),
    force: Annotated[bool, typer.Option("--force", help=_h(G, "force"))] = _d(G, "force"),
    metrics_port: Annotated[int | None, typer.Option(help=_h(G, "metrics_port"))] = _d(G, "metrics_port"),
    metrics_host: Annotated[str, typer.Option(help=_h(G, "metrics_host"))] = _d(G, "metrics_host"),
    metrics_allow_remote: Annotated[
        bool, typer.Option("--metrics-allow-remote", help=_h(G, "metrics_allow_remote"))
    ] = _d(G, "metrics_allow_remote"),
    shard: Annotated[
        str | None, typer.Option("--shard", metavar="i/N", help=_h(G, "shard"), rich_help_panel=_PARTS)
    ] = _d(G, "shard"),
    shards: Annotated[
        int | None, typer.Option("--shards", metavar="N", help=_h(G, "shards"), rich_help_panel=_PARTS)
    ] = _d(G, "shards"),
    replica_slice: Annotated[
        str | None, typer.Option(metavar="i/N", help=_h(G, "replica_slice"), rich_help_panel=_PARTS)
    ] = _d(G, "replica_slice"),
    shard_runner: Annotated[
        str, typer.Option(metavar=_c(G, "shard_runner"), help=_h(G, "shard_runner"), rich_help_panel=_PARTS)
    ] = _d(G, "shard_runner"),
    shard_retries: Annotated[
        int, typer.Option(help=_h(G, "shard_retries"), rich_help_panel=_PARTS)
    ] = _d(G, "shard_retries"),
    event_loop: Annotated[str, typer.Option(metavar=_c(G, "event_loop"), help=_h(G, "event_loop"))] = _d(G, "event_loop"),
    warmup: Annotated[bool, typer.Option(help=_h(G, "warmup"))] = _d(G, "warmup"),
    warmup_timeout_s: Annotated[float, typer.Option(help=_h(G, "warmup_timeout_s"))] = _d(G, "warmup_timeout_s"),
    api_key: Annotated[
        str | None,
        typer.Option("--api-key", envvar="FLEETGEN_API_KEY", show_envvar=True, help=_h(G, "api_key")),
    ] = _d(G, "api_key"),
    config: Annotated[
        Path | None, typer.Option(help="YAML file with a generate config (any field); flags given override it.")
    ] = None,
) -> None:
    """Regenerate the assistant turns of every prompt across the fleet, exactly once per (prompt, sample)."""
    flags = {
        "prompts": prompts, "output": output, "fleet": fleet, "endpoint": endpoint or [], "model": model,
        "samples": samples, "max_tokens": max_tokens, "temperature": temperature, "top_p": top_p, "seed": seed,
        "concurrency": concurrency, "profiles": read_profiles(profiles) if profiles else [], "reasoning": reasoning,
        "truncation": truncation, "tool_match": tool_match, "history_reasoning": history_reasoning, "tokenizer": tokenizer,
        "context_length": context_length, "dispatch": dispatch, "prefix_affinity": prefix_affinity,
        "prefix_routing": prefix_routing,
        "hedge": hedge, "retry_errors": retry_errors, "token_ids": token_ids,
        "require_token_ids": require_token_ids, "force": force, "api_key": api_key,
        "metrics_port": metrics_port, "metrics_host": metrics_host, "metrics_allow_remote": metrics_allow_remote,
        "shard": shard, "shards": shards, "replica_slice": replica_slice, "shard_runner": shard_runner, "shard_retries": shard_retries,
        "event_loop": event_loop, "warmup": warmup, "warmup_timeout_s": warmup_timeout_s,
    }
    base = merge_flags(ctx, flags, config, _FIELD_OF)
    cfg = validate(GenerateConfig, base, source=f"{config} and flags" if config else "flags")
    if cfg.shards is not None:
        from fleetgen.generate import run_shards

        sharded = run_shards(cfg)
        _print_shards(sharded, cfg.output_dir)
        if sharded.interrupted:
            raise typer.Exit(130)
        return
    stats = _run_with_progress(cfg)
    print_summary(stats, cfg.output_dir)
    if stats.interrupted:
        raise typer.Exit(130)


def read_profiles(path: Path) -> list:
    """The `profiles` field from a file: a list of profiles, or a mapping with a `profiles` list (JSON is YAML)."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"--profiles {path}: cannot read it: {e.strerror}", hint="check the path") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"--profiles {path}: not valid YAML or JSON: {e}", hint="fix the syntax at the place named") from None
    if isinstance(data, dict) and "profiles" in data:
        data = data["profiles"]
    if not isinstance(data, list):
        raise ConfigError(
            f"--profiles {path}: expected a list of profiles (or a mapping with `profiles:`), got {type(data).__name__}",
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

    from fleetgen.generate import generate

    if not sys.stderr.isatty():
        return generate(cfg)
    columns = (
        TextColumn("[bold]generate"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(), TimeRemainingColumn(), TextColumn("{task.fields[load]}"),
    )
    with Progress(*columns, console=console, refresh_per_second=2) as progress:
        task = progress.add_task("generate", total=None, rate="", load="")

        def on_progress(s: Stats) -> None:
            load = " ".join(
                f"r{r.index}:{r.outstanding}/{r.window}" + ("" if r.in_rotation else "[yellow]…[/]" if r.warming else "[red]✗[/]")
                for r in s.replicas
            )
            progress.update(
                task, total=max(s.total, s.done), completed=s.done, rate=f"{s.output_tokens_per_s:.0f} tok/s", load=load
            )

        return generate(cfg, on_progress=on_progress)


def print_summary(s: Stats, outdir: Path) -> None:
    t = Table(title=f"generate: {outdir}")
    for col in ("", "ok", "errors / 4xx", "truncated", "out tokens", "tok/s", "requests", "failures", "stalled", "hedges", "moved"):
        t.add_column(col, justify="right")
    for r in s.replicas:
        rate = r.completion_tokens / s.elapsed_s if s.elapsed_s else 0
        t.add_row(
            f"replica {r.index}", str(r.ok), str(r.rejected), "", str(r.completion_tokens), f"{rate:.1f}",
            str(r.requests), str(r.failures), str(r.stalled), str(r.hedges), str(r.moved),
        )
    t.add_row(
        "[bold]total", str(s.ok), str(s.errors), str(s.truncated), str(s.completion_tokens),
        f"{s.output_tokens_per_s:.1f}", "", "", "", "", "",
    )
    print_whole(console, t)
    for r in s.replicas:
        if (gone := s.stopped_answering(r)) is not None:
            console.print(f"[yellow]replica {r.index} ({r.endpoint}) stopped answering[/] {describe_silence(gone)}")
    tail = f"wall {s.elapsed_s:.1f}s; {s.resumed} already done before this run"
    if s.stopped_reason:
        tail += f"; {s.stopped_reason}"
    if s.turns_without_ids:
        why = ", ".join(f"{MISSING[k]} {n}" for k, n in sorted(s.ids_missing.items()))
        tail += f"; {s.turns_without_ids} turns without token ids ({why}; the tokens export re-tokenizes those rows)"
    console.print(tail + f"; stats in {outdir / 'stats.json'}")


def _print_shards(run: ShardedRun, outdir: Path) -> None:
    from fleetgen.generate import ShardDone

    t = Table(title=f"generate: {outdir} ({len(run.outcomes)} shards as {'Ray tasks' if run.runner == 'ray' else 'processes'})")
    for col in ("shard", "ran on", "ok", "errors", "resumed", "out tokens", "wall s"):
        t.add_column(col, justify="right")
    for o in run.outcomes:
        if isinstance(o, ShardDone):
            rows = o.stats["rows"]
            t.add_row(str(o.index), o.where, str(rows["ok"]), str(rows["errors"]), str(rows["resumed"]),
                      str(o.stats["tokens"]["completion"]), f"{o.stats['wall_s']:.1f}")
    s = run.stats
    t.add_row("[bold]total", "", str(s["rows"].get("ok", 0)), str(s["rows"].get("errors", 0)),
              str(s["rows"].get("resumed", 0)), str(s["tokens"].get("completion", 0)), f"{s['wall_s']:.1f}")
    print_whole(console, t)
    console.print(f"one output: export and report read every shard's files in {outdir}")


def register(app: typer.Typer) -> None:
    app.command("generate")(cmd_generate)
