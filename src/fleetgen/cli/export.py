"""`fleetgen export OUTDIR --format specforge|sharegpt|openai|tokens|speculators -o FILE_OR_DIR`: parse flags, call `export`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from fleetgen.config import field_help as _h
from fleetgen.errors import ConfigError
from fleetgen.export.config import ExportConfig

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


def cmd_export(
    results_dir: Annotated[Path, typer.Argument(help=_h(ExportConfig, "results_dir"))],
    output: Annotated[Path, typer.Option("--output", "-o", help=_h(ExportConfig, "output"))],
    format: Annotated[str, typer.Option("--format", help=_h(ExportConfig, "format"))] = "specforge",
    tokenizer: Annotated[Optional[str], typer.Option(help=_h(ExportConfig, "tokenizer"))] = None,
    split: Annotated[
        Optional[str], typer.Option(help="Eval split as eval=FRACTION; " + _h(ExportConfig, "eval_fraction"))
    ] = None,
    split_salt: Annotated[str, typer.Option(help=_h(ExportConfig, "split_salt"))] = "fleetgen",
    reasoning: Annotated[str, typer.Option(help=_h(ExportConfig, "reasoning"))] = "train",
    finish_reason: Annotated[
        Optional[list[str]], typer.Option("--finish-reason", help=_h(ExportConfig, "finish_reasons") + " (repeatable)")
    ] = None,
    min_supervised_tokens: Annotated[int, typer.Option(help=_h(ExportConfig, "min_supervised_tokens"))] = 0,
    keep_think_markers: Annotated[
        bool, typer.Option("--keep-think-markers", help="Turn off: " + _h(ExportConfig, "drop_think_markers"))
    ] = False,
    max_length: Annotated[Optional[int], typer.Option(help=_h(ExportConfig, "max_length"))] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help=_h(ExportConfig, "overwrite"))] = False,
    require_token_ids: Annotated[
        bool, typer.Option("--require-token-ids", help=_h(ExportConfig, "require_token_ids"))
    ] = False,
) -> None:
    """Write drafter-training data from a generate run: SpecForge/ShareGPT/OpenAI JSONL or token ids + loss mask."""
    from fleetgen.config import validate
    from fleetgen.export import export

    data = {
        "results_dir": results_dir, "output": output, "format": format, "tokenizer": tokenizer,
        "eval_fraction": _parse_split(split), "split_salt": split_salt, "reasoning": reasoning,
        "min_supervised_tokens": min_supervised_tokens, "drop_think_markers": not keep_think_markers,
        "max_length": max_length, "overwrite": overwrite, "require_token_ids": require_token_ids,
    }
    if finish_reason:
        data["finish_reasons"] = finish_reason
    cfg = validate(ExportConfig, data, source="flags")
    s = export(cfg)

    t = Table(title=f"export {s.format}: {s.rows_written} rows from {s.read} records", title_justify="left")
    t.add_column("outcome")
    t.add_column("rows", justify="right")
    if s.split_conversations:
        t.add_row(f"split per turn (template rewrites earlier turns): {s.split_conversations} conversations", f"+{s.extra_rows}")
    for split_name, path in s.outputs.items():
        t.add_row(f"written {split_name} -> {path}", str(s.written.get(split_name, 0)))
    for reason, n in s.filtered.most_common():
        t.add_row(f"filtered: {reason}", str(n))
    for reason, n in s.failed.most_common():
        t.add_row(f"[red]failed: {reason}[/]", str(n))
    console.print(t)
    if s.format in ("tokens", "speculators"):
        console.print(f"{s.supervised_tokens} supervised of {s.total_tokens} tokens; round-trip failures: {sum(s.failed.values())}")
        console.print(f"{s.from_ids} records from the sampled token ids; {sum(s.retokenized.values())} re-tokenized from text (fallback)")
        for reason, n in s.retokenized.most_common():
            console.print(f"  re-tokenized: {reason}: {n}")
    for ex in s.failed_examples:
        console.print(f"[dim]  e.g. {ex}[/]")
    if s.corrupt_lines or s.duplicates:
        console.print(f"[yellow]skipped {s.corrupt_lines} corrupt lines and {s.duplicates} repeated (id, sample) pairs[/]")


def register(app: typer.Typer) -> None:
    app.command("export")(cmd_export)
