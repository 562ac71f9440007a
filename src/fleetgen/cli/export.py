"""`fleetgen export OUTDIR --format FORMAT -o FILE_OR_DIR`: parse flags, call `export`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from fleetgen.cli._config import Binding, typed
from fleetgen.cli._config import choices as _c
from fleetgen.cli._config import default as _d
from fleetgen.cli._config import field_help as _h
from fleetgen.errors import ConfigError
from fleetgen.export import ExportConfig

E = "ExportConfig"
BINDINGS = {
    "export": Binding(E, {"finish_reason": "finish_reasons"}, derived={"split": "eval_fraction"}),
}

console = Console(stderr=True, highlight=False)


def _parse_split(text: str | None) -> float:
    """`eval=0.02` (or just `0.02`) -> 0.02."""
    if not text:
        return 0.0
    name, _, value = text.rpartition("=")
    if name not in ("", "eval"):
        raise ConfigError(f"--split {text!r}: expected eval=FRACTION", hint="e.g. --split eval=0.02")
    try:
        return float(value)
    except ValueError:
        raise ConfigError(f"--split {text!r}: {value!r} is not a number", hint="e.g. --split eval=0.02") from None


def _renamed_reasoning(ctx: typer.Context, new: str, old: str) -> str:
    """export's `--reasoning` was renamed (generate's `--reasoning`
    takes other words); the old spelling works one release."""
    if typed(ctx, "reasoning") and new != old:
        raise ConfigError(
            f"--reasoning {old} and --reasoning-in-data {new} disagree", hint="give --reasoning-in-data only"
        )
    console.print("note: export --reasoning is now --reasoning-in-data (the old spelling goes in the next release)")
    return old


def cmd_export(
    ctx: typer.Context,
    results_dir: Annotated[Path, typer.Argument(help=_h(E, "results_dir"))],
    output: Annotated[Path, typer.Option("--output", "-o", help=_h(E, "output"))],
    format: Annotated[str, typer.Option("--format", metavar=_c(E, "format"), help=_h(E, "format"))] = _d(E, "format"),
    tokenizer: Annotated[str | None, typer.Option(help=_h(E, "tokenizer"))] = _d(E, "tokenizer"),
    split: Annotated[
        str | None, typer.Option(metavar="eval=FRACTION", help="Eval split as eval=FRACTION; " + _h(E, "eval_fraction"))
    ] = None,
    split_salt: Annotated[str, typer.Option(help=_h(E, "split_salt"))] = _d(E, "split_salt"),
    reasoning: Annotated[
        str, typer.Option("--reasoning-in-data", metavar=_c(E, "reasoning"), help=_h(E, "reasoning"))
    ] = _d(E, "reasoning"),
    old_reasoning: Annotated[
        str | None,
        typer.Option("--reasoning", metavar=_c(E, "reasoning"), hidden=True, help="Deprecated: --reasoning-in-data."),
    ] = None,
    finish_reason: Annotated[
        list[str] | None, typer.Option("--finish-reason", help=_h(E, "finish_reasons") + " (repeatable)")
    ] = _d(E, "finish_reasons"),
    min_supervised_tokens: Annotated[int, typer.Option(help=_h(E, "min_supervised_tokens"))] = _d(
        E, "min_supervised_tokens"
    ),
    drop_think_markers: Annotated[
        bool, typer.Option("--drop-think-markers/--keep-think-markers", help=_h(E, "drop_think_markers"))
    ] = _d(E, "drop_think_markers"),
    max_length: Annotated[int | None, typer.Option(help=_h(E, "max_length"))] = _d(E, "max_length"),
    overwrite: Annotated[bool, typer.Option("--overwrite", help=_h(E, "overwrite"))] = _d(E, "overwrite"),
    require_token_ids: Annotated[bool, typer.Option("--require-token-ids", help=_h(E, "require_token_ids"))] = _d(
        E, "require_token_ids"
    ),
) -> None:
    """Write drafter-training data from a generate run: SpecForge/ShareGPT/OpenAI JSONL or token ids + loss mask."""
    from fleetgen.config import validate
    from fleetgen.export import export

    if old_reasoning is not None:
        reasoning = _renamed_reasoning(ctx, reasoning, old_reasoning)
    data = {
        "results_dir": results_dir,
        "output": output,
        "format": format,
        "tokenizer": tokenizer,
        "eval_fraction": _parse_split(split),
        "split_salt": split_salt,
        "reasoning": reasoning,
        "min_supervised_tokens": min_supervised_tokens,
        "drop_think_markers": drop_think_markers,
        "max_length": max_length,
        "overwrite": overwrite,
        "require_token_ids": require_token_ids,
    }
    if finish_reason:
        data["finish_reasons"] = finish_reason
    cfg = validate(ExportConfig, data, source="flags")
    s = export(cfg)

    t = Table(title=f"export {s.format}: {s.rows_written} rows from {s.read} records", title_justify="left")
    t.add_column("outcome")
    t.add_column("rows", justify="right")
    if s.split_conversations:
        t.add_row(
            f"split per turn (template rewrites earlier turns): {s.split_conversations} conversations",
            f"+{s.extra_rows}",
        )
    for split_name, path in s.outputs.items():
        t.add_row(f"written {split_name} -> {path}", str(s.written.get(split_name, 0)))
    for reason, n in s.filtered.most_common():
        t.add_row(f"filtered: {reason}", str(n))
    for reason, n in s.failed.most_common():
        t.add_row(f"[red]failed: {reason}[/]", str(n))
    console.print(t)
    if s.format in ("tokens", "speculators"):
        console.print(
            f"{s.supervised_tokens} supervised of {s.total_tokens} tokens; round-trip failures: "
            f"{sum(s.failed.values())}"
        )
        console.print(
            f"{s.from_ids} records from the sampled token ids; {sum(s.retokenized.values())} re-tokenized from text "
            "(fallback)"
        )
        for reason, n in s.retokenized.most_common():
            console.print(f"  re-tokenized: {reason}: {n}")
    for ex in s.failed_examples:
        console.print(f"[dim]  e.g. {ex}[/]")
    if s.corrupt_lines or s.duplicates:
        console.print(
            f"[yellow]skipped {s.corrupt_lines} corrupt lines and {s.duplicates} repeated (id, sample) pairs[/]"
        )


def register(app: typer.Typer) -> None:
    app.command("export")(cmd_export)
