"""`fleetgen up`: start a fleet, with a live view of each replica's start-up."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from fleetgen.cli._config import Binding
from fleetgen.cli._config import choices as _c
from fleetgen.cli._config import default as _d
from fleetgen.cli._config import field_help as _h
from fleetgen.cli.fleet import ApiKeyOpt, StateOpt
from fleetgen.fleet import FleetConfig

F = "FleetConfig"
_FIELD_OF = {"startup_timeout": "startup_timeout_s", "state": "state_dir"}
BINDINGS = {"up": Binding(F, _FIELD_OF)}


def cmd_up(
    ctx: typer.Context,
    engine: Annotated[str, typer.Option(metavar=_c(F, "engine"), help=_h(F, "engine"))] = _d(F, "engine"),
    model: Annotated[str, typer.Option(help=_h(F, "model"))] = _d(F, "model"),
    replicas: Annotated[int | None, typer.Option(help=_h(F, "replicas"))] = _d(F, "replicas"),
    gpus: Annotated[str, typer.Option(help=_h(F, "gpus"))] = _d(F, "gpus"),
    tp: Annotated[int, typer.Option(help=_h(F, "tp"))] = _d(F, "tp"),
    replicas_per_gpu: Annotated[int, typer.Option(help=_h(F, "replicas_per_gpu"))] = _d(F, "replicas_per_gpu"),
    host: Annotated[str, typer.Option(help=_h(F, "host"))] = _d(F, "host"),
    port_base: Annotated[int, typer.Option(help=_h(F, "port_base"))] = _d(F, "port_base"),
    max_running_requests: Annotated[int | None, typer.Option(help=_h(F, "max_running_requests"))] = _d(
        F, "max_running_requests"
    ),
    context_length: Annotated[int | None, typer.Option(help=_h(F, "context_length"))] = _d(F, "context_length"),
    enforce_eager: Annotated[bool, typer.Option(help=_h(F, "enforce_eager"))] = _d(F, "enforce_eager"),
    tool_call_parser: Annotated[str | None, typer.Option(help=_h(F, "tool_call_parser"))] = _d(F, "tool_call_parser"),
    prefix_cache: Annotated[bool | None, typer.Option(help=_h(F, "prefix_cache"))] = _d(F, "prefix_cache"),
    python: Annotated[str | None, typer.Option(help=_h(F, "python"))] = _d(F, "python"),
    doctor: Annotated[bool, typer.Option(help=_h(F, "doctor"))] = _d(F, "doctor"),
    fix_dir: Annotated[Path | None, typer.Option(help=_h(F, "fix_dir"))] = _d(F, "fix_dir"),
    startup_timeout: Annotated[float, typer.Option(help=_h(F, "startup_timeout_s"))] = _d(F, "startup_timeout_s"),
    ray: Annotated[str | None, typer.Option("--ray", metavar="ADDRESS|auto", help=_h(F, "ray"))] = _d(F, "ray"),
    state: StateOpt = _d(F, "state_dir"),
    api_key: ApiKeyOpt = _d(F, "api_key"),
    config: Annotated[Path | None, typer.Option(help="YAML file with a fleet config; flags given override it.")] = None,
    capture_layers: Annotated[
        str | None,
        typer.Option(
            metavar="eagle3|dflash|LIST[+...]",
            help="Start a capture fleet (vLLM extract_hidden_states + fleetgen's connector) for `fleetgen capture "
            "--fleet`: these layers, or the union of several joined by + (eagle3+dflash).",
        ),
    ] = None,
    capture_dir: Annotated[
        Path | None,
        typer.Option(help="Capture fleet: where replicas stage hidden states; default STATE/capture-staging."),
    ] = None,
) -> None:
    """Start a data-parallel fleet and return once every replica is verified. Engine flags go after `--`."""
    import asyncio

    from rich.console import Console

    from fleetgen.cli._config import merge_flags
    from fleetgen.config import validate

    console = Console(stderr=True, soft_wrap=True)
    flags = {
        "engine": engine,
        "model": model,
        "replicas": replicas,
        "gpus": gpus,
        "tp": tp,
        "replicas_per_gpu": replicas_per_gpu,
        "host": host,
        "port_base": port_base,
        "max_running_requests": max_running_requests,
        "context_length": context_length,
        "enforce_eager": enforce_eager,
        "tool_call_parser": tool_call_parser,
        "prefix_cache": prefix_cache,
        "python": python,
        "doctor": doctor,
        "fix_dir": fix_dir,
        "startup_timeout": startup_timeout,
        "state": state,
        "api_key": api_key,
        "ray": ray,
    }
    base = merge_flags(ctx, flags, config, _FIELD_OF)
    if ctx.args:
        base["engine_args"] = list(base.get("engine_args") or []) + list(ctx.args)
    if capture_layers:
        from fleetgen.capture.fleet_args import fleet_capture_args

        staging = capture_dir or Path(str(base.get("state_dir") or state)) / "capture-staging"
        flags_, layers = fleet_capture_args(str(base.get("model") or model), capture_layers, staging)
        base["engine_args"] = list(base.get("engine_args") or []) + flags_
        console.print(f"capture fleet: layers {layers}, staging {staging}")
    cfg = validate(FleetConfig, base, source=f"{config} and flags" if config else "flags")
    fleet = asyncio.run(_up_with_live_view(cfg, console))
    for r in fleet.replicas:
        where = f"  node {r.node}  actor {r.actor}" if r.actor else ""
        console.print(f"replica {r.index}: {r.endpoint}  pid {r.pid}{where}  log {r.log_path}")
    console.print(
        f"[green]fleet ready[/]: {len(fleet.replicas)} replica(s) of {fleet.served_model_name}; state in "
        f"{cfg.state_dir}"
    )
    from fleetgen.generate.turns.paths import fleet_paths

    key = cfg.api_key.get_secret_value() if cfg.api_key else None
    console.print(f"generation path: {asyncio.run(fleet_paths(fleet.endpoints, fleet.served_model_name, key))}")


async def _up_with_live_view(cfg: FleetConfig, console):
    from rich.live import Live
    from rich.table import Table

    from fleetgen.fleet import ReplicaProgress, up
    from fleetgen.fleet.engines import Phase

    rows: dict[int, ReplicaProgress] = {}
    if not sys.stderr.isatty():
        last: dict[int, Phase] = {}

        def on_progress(p: ReplicaProgress) -> None:
            if last.get(p.index) != p.phase:
                last[p.index] = p.phase
                console.print(f"replica {p.index}: {p.phase.value} ({p.elapsed_s:.0f}s) {p.detail}")

        return await up(cfg, on_progress=on_progress)

    def render() -> Table:
        t = Table(title="starting fleet", expand=False)
        for col in ("replica", "phase", "elapsed", "detail"):
            t.add_column(col)
        for i in sorted(rows):
            p = rows[i]
            color = {"ready": "green", "failed": "red"}.get(p.phase.value, "yellow")
            t.add_row(str(i), f"[{color}]{p.phase.value}[/]", f"{p.elapsed_s:.0f}s", p.detail)
        return t

    with Live(render(), console=console, refresh_per_second=2) as live:

        def on_progress(p: ReplicaProgress) -> None:
            rows[p.index] = p
            live.update(render())

        return await up(cfg, on_progress=on_progress)


def register(app: typer.Typer) -> None:
    app.command("up", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(cmd_up)
