"""`fleetgen capture RESULTS_DIR -o OUT --layers eagle3 --dtype bf16`: parse flags, call `capture`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fleetgen.cli._config import Binding
from fleetgen.cli._config import choices as _c
from fleetgen.cli._config import default as _d
from fleetgen.cli._config import field_help as _h

C = "CaptureConfig"
BINDINGS = {"capture": Binding(C, {"endpoint": "endpoints"})}


def cmd_capture(
    results_dir: Annotated[Path, typer.Argument(help=_h(C, "results_dir"))],
    output: Annotated[Path, typer.Option("--output", "-o", help=_h(C, "output"))],
    layers: Annotated[str, typer.Option(metavar="eagle3|dflash|LIST", help=_h(C, "layers"))] = _d(C, "layers"),
    draft_layers: Annotated[int, typer.Option(help=_h(C, "draft_layers"))] = _d(C, "draft_layers"),
    dtype: Annotated[str, typer.Option(metavar=_c(C, "dtype"), help=_h(C, "dtype"))] = _d(C, "dtype"),
    backend: Annotated[str, typer.Option(metavar=_c(C, "backend"), help=_h(C, "backend"))] = _d(C, "backend"),
    fleet: Annotated[Path | None, typer.Option(help=_h(C, "fleet"))] = _d(C, "fleet"),
    endpoint: Annotated[list[str] | None, typer.Option("--endpoint", help=_h(C, "endpoints"))] = None,
    server_layers: Annotated[str | None, typer.Option(help=_h(C, "server_layers"))] = _d(C, "server_layers"),
    model: Annotated[str | None, typer.Option(help=_h(C, "model"))] = _d(C, "model"),
    device: Annotated[str, typer.Option(help=_h(C, "device"))] = _d(C, "device"),
    batch_tokens: Annotated[int, typer.Option(help=_h(C, "batch_tokens"))] = _d(C, "batch_tokens"),
    concurrency: Annotated[int, typer.Option(help=_h(C, "concurrency"))] = _d(C, "concurrency"),
    max_length: Annotated[int | None, typer.Option(help=_h(C, "max_length"))] = _d(C, "max_length"),
    limit: Annotated[int | None, typer.Option(help=_h(C, "limit"))] = _d(C, "limit"),
    specforge: Annotated[bool, typer.Option("--specforge", help=_h(C, "specforge"))] = _d(C, "specforge"),
    force: Annotated[bool, typer.Option("--force", help=_h(C, "force"))] = _d(C, "force"),
    api_key: Annotated[
        str | None, typer.Option(envvar="FLEETGEN_API_KEY", show_envvar=True, help=_h(C, "api_key"))
    ] = None,
) -> None:
    """Capture the target's hidden states at a drafter's layers over each row's recorded ids, exactly once."""
    from rich.console import Console

    from fleetgen.capture import CaptureConfig, capture
    from fleetgen.config import validate
    from fleetgen.fleet.capture_jobs import CaptureProgressFile

    console = Console(stderr=True, highlight=False)
    data = {
        "results_dir": results_dir,
        "output": output,
        "layers": layers,
        "draft_layers": draft_layers,
        "dtype": dtype,
        "backend": backend,
        "fleet": fleet,
        "endpoints": endpoint or [],
        "server_layers": server_layers,
        "model": model,
        "device": device,
        "batch_tokens": batch_tokens,
        "concurrency": concurrency,
        "max_length": max_length,
        "limit": limit,
        "specforge": specforge,
        "force": force,
        "api_key": api_key,
    }
    cfg = validate(CaptureConfig, data, source="flags")
    started: list[bool] = []
    # `fleetgen status --state FLEET` shows a capture on a fleet from this file (fleet/capture_jobs.py)
    publish = CaptureProgressFile(cfg.fleet, cfg.output) if cfg.fleet is not None else None

    def progress(s) -> None:
        if not started:
            started.append(True)
            console.print(
                f"capture: layers {s.layers}, {s.bytes_per_token:,} bytes a token ({cfg.dtype}); "
                f"{s.already} already captured, about {s.planned_tokens:,} tokens "
                f"({s.planned_tokens * s.bytes_per_token / 1e9:.2f} GB) to go"
            )
        if publish is not None:
            publish(s)

    try:
        s = capture(cfg, on_progress=progress)
    finally:
        if publish is not None:
            publish.close()
    rate = s.tokens / s.seconds if s.seconds else 0.0
    console.print(
        f"captured {s.captured} records ({s.rows} rows, {s.tokens:,} tokens, {s.bytes / 1e6:.1f} MB) in "
        f"{s.seconds:.1f}s ({rate:,.0f} tokens/s); {s.from_text} from text (no recorded ids); "
        f"{s.failed} failed; {s.total_captured} in {s.output}"
    )
    for reason, n in sorted(s.failures.items(), key=lambda kv: -kv[1]):
        console.print(f"  failed: {reason}: {n}")
    if s.stopped:
        console.print(f"[yellow]stopped early: {s.stopped}; run the same command again to resume[/]")
    if cfg.specforge:
        console.print(
            f"specforge: wrote {s.specforge_written} files ({s.specforge_kept} already whole) "
            f"in {s.output / 'specforge'}"
        )
    console.print(f"hidden states: {s.output}")


def register(app: typer.Typer) -> None:
    app.command("capture")(cmd_capture)
