"""`fleetgen generate`: parse flags into a GenerateConfig, call the library, show progress and a summary."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
import yaml
from rich.console import Console
from rich.table import Table

from fleetgen.cli._config import merge_flags
from fleetgen.cli._wide import print_whole
from fleetgen.config import field_help as _h
from fleetgen.config import validate
from fleetgen.errors import ConfigError
# Only the config and two light modules at module level: the runner (aiohttp, the journal) loads when the command runs.
from fleetgen.generate.config import GenerateConfig
from fleetgen.rows.stats_file import describe_silence
from fleetgen.rows.token_ids import MISSING

if TYPE_CHECKING:
    from fleetgen.generate import ShardedRun, Stats

console = Console(stderr=True)

# CLI flag -> config field, where the names differ.
_FIELD_OF = {"output": "output_dir", "fleet": "fleet_state", "endpoint": "endpoints"}


def cmd_generate(
    ctx: typer.Context,
    prompts: Annotated[Path, typer.Argument(help=_h(GenerateConfig, "prompts"))],
    output: Annotated[Path, typer.Option("--output", "-o", help=_h(GenerateConfig, "output_dir"))],
    fleet: Annotated[Optional[Path], typer.Option("--fleet", help=_h(GenerateConfig, "fleet_state"))] = None,
    endpoint: Annotated[Optional[list[str]], typer.Option("--endpoint", help=_h(GenerateConfig, "endpoints"))] = None,
    model: Annotated[Optional[str], typer.Option(help=_h(GenerateConfig, "model"))] = None,
    samples: Annotated[int, typer.Option(help=_h(GenerateConfig, "samples"))] = 1,
    max_tokens: Annotated[int, typer.Option(help=_h(GenerateConfig, "max_tokens"))] = 2048,
    temperature: Annotated[float, typer.Option(help=_h(GenerateConfig, "temperature"))] = 0.7,
    top_p: Annotated[float, typer.Option(help=_h(GenerateConfig, "top_p"))] = 1.0,
    seed: Annotated[Optional[int], typer.Option(help=_h(GenerateConfig, "seed"))] = None,
    concurrency: Annotated[str, typer.Option(help=_h(GenerateConfig, "concurrency"))] = "auto",
    profiles: Annotated[
        Optional[Path],
        typer.Option("--profiles", help="YAML or JSON file holding the profiles list. " + _h(GenerateConfig, "profiles")),
    ] = None,
    reasoning: Annotated[str, typer.Option(help=_h(GenerateConfig, "reasoning"))] = "save",
    truncation: Annotated[str, typer.Option(help=_h(GenerateConfig, "truncation"))] = "keep",
    history_reasoning: Annotated[str, typer.Option(help=_h(GenerateConfig, "history_reasoning"))] = "template",
    tokenizer: Annotated[Optional[str], typer.Option(help=_h(GenerateConfig, "tokenizer"))] = None,
    tool_match: Annotated[str, typer.Option(help=_h(GenerateConfig, "tool_match"))] = "arguments",
    context_length: Annotated[Optional[int], typer.Option(help=_h(GenerateConfig, "context_length"))] = None,
    dispatch: Annotated[str, typer.Option(help=_h(GenerateConfig, "dispatch"))] = "least-outstanding",
    prefix_affinity: Annotated[bool, typer.Option(help=_h(GenerateConfig, "prefix_affinity"))] = True,
    prefix_routing: Annotated[bool, typer.Option(help=_h(GenerateConfig, "prefix_routing"))] = True,
    hedge: Annotated[bool, typer.Option(help=_h(GenerateConfig, "hedge"))] = True,
    retry_errors: Annotated[bool, typer.Option("--retry-errors", help=_h(GenerateConfig, "retry_errors"))] = False,
    token_ids: Annotated[bool, typer.Option(help=_h(GenerateConfig, "token_ids"))] = True,
    require_token_ids: Annotated[
        bool, typer.Option("--require-token-ids", help=_h(GenerateConfig, "require_token_ids"))
    ] = False,
    force: Annotated[bool, typer.Option("--force", help=_h(GenerateConfig, "force"))] = False,
    metrics_port: Annotated[Optional[int], typer.Option(help=_h(GenerateConfig, "metrics_port"))] = None,
    metrics_host: Annotated[str, typer.Option(help=_h(GenerateConfig, "metrics_host"))] = "127.0.0.1",
    metrics_allow_remote: Annotated[
        bool, typer.Option("--metrics-allow-remote", help=_h(GenerateConfig, "metrics_allow_remote"))
    ] = False,
    shard: Annotated[Optional[str], typer.Option("--shard", help=_h(GenerateConfig, "shard"))] = None,
    shards: Annotated[Optional[int], typer.Option("--shards", help=_h(GenerateConfig, "shards"))] = None,
    replica_slice: Annotated[Optional[str], typer.Option(help=_h(GenerateConfig, "replica_slice"))] = None,
    shard_runner: Annotated[str, typer.Option(help=_h(GenerateConfig, "shard_runner"))] = "auto",
    shard_retries: Annotated[int, typer.Option(help=_h(GenerateConfig, "shard_retries"))] = 3,
    event_loop: Annotated[str, typer.Option(help=_h(GenerateConfig, "event_loop"))] = "asyncio",
    warmup: Annotated[bool, typer.Option(help=_h(GenerateConfig, "warmup"))] = True,
    warmup_timeout_s: Annotated[float, typer.Option(help=_h(GenerateConfig, "warmup_timeout_s"))] = 900.0,
    api_key: Annotated[
        Optional[str],
        typer.Option("--api-key", envvar="FLEETGEN_API_KEY", show_envvar=True, help=_h(GenerateConfig, "api_key")),
    ] = None,
    config: Annotated[
        Optional[Path], typer.Option(help="YAML file with a generate config (any field); flags given override it.")
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
    _print_summary(stats, cfg.output_dir)
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
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

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


def _print_summary(s: Stats, outdir: Path) -> None:
    t = Table(title=f"generate: {outdir}")
    for col in ("", "ok", "errors / 4xx", "truncated", "out tokens", "tok/s", "requests", "failures", "hedges", "moved"):
        t.add_column(col, justify="right")
    for r in s.replicas:
        rate = r.completion_tokens / s.elapsed_s if s.elapsed_s else 0
        t.add_row(
            f"replica {r.index}", str(r.ok), str(r.rejected), "", str(r.completion_tokens), f"{rate:.1f}",
            str(r.requests), str(r.failures), str(r.hedges), str(r.moved),
        )
    t.add_row(
        "[bold]total", str(s.ok), str(s.errors), str(s.truncated), str(s.completion_tokens),
        f"{s.output_tokens_per_s:.1f}", "", "", "", "",
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
