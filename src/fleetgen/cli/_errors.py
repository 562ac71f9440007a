"""Turn a FleetgenError into one line and a hint, instead of a traceback."""

from __future__ import annotations

import sys

from rich.console import Console

from fleetgen.errors import FleetgenError, ReplicaStartError

_err = Console(stderr=True, highlight=False, soft_wrap=True)


def report_error(e: FleetgenError) -> int:
    _err.print(f"[bold red]error:[/] {e.message}", markup=True)
    if isinstance(e, ReplicaStartError) and e.log_tail:
        _err.print("[dim]--- last log lines ---[/]")
        _err.print(e.log_tail, markup=False)
    if e.hint:
        _err.print(f"[yellow]hint:[/] {e.hint}", markup=True)
    return 2


def run_guarded(fn) -> None:
    try:
        fn()
    except FleetgenError as e:
        sys.exit(report_error(e))
    except KeyboardInterrupt:
        _err.print("interrupted")
        sys.exit(130)
