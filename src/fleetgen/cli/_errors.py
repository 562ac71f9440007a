"""Turn a FleetgenError into one line and a hint, instead of a traceback."""

from __future__ import annotations

import errno
import functools
import sys

from fleetgen.errors import FleetgenError, ReplicaStartError


@functools.cache
def _err():
    """stderr's console, built at the first error: importing rich
    costs tens of ms a start without errors need not pay."""
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


def report_error(e: FleetgenError) -> int:
    _err().print(f"[bold red]error:[/] {e.message}", markup=True)
    if isinstance(e, ReplicaStartError) and e.log_tail:
        _err().print("[dim]--- last log lines ---[/]")
        _err().print(e.log_tail, markup=False)
    if e.hint:
        _err().print(f"[yellow]hint:[/] {e.hint}", markup=True)
    return 2


_OS_HINTS = {
    errno.ENOENT: "check the path named above",
    errno.ENOSPC: "free space on that disk, then run the same command again (runs resume)",
    errno.EROFS: "choose a writable location, or make this one writable",
    errno.EACCES: "check the permissions of the path named above",
    errno.EISDIR: "give a file path, not a directory",
    errno.ENOTDIR: "a part of the path is a file, not a directory: fix the path",
}


def report_os_error(e: OSError) -> int:
    """A file-system error that escaped translation still gets one line naming the path, and a hint."""
    where = f": {e.filename}" if e.filename else ""
    return report_error(
        FleetgenError(f"{e.strerror or e}{where}", hint=_OS_HINTS.get(e.errno or 0, "check the path named above"))
    )


def run_guarded(fn) -> None:
    try:
        fn()
    except FleetgenError as e:
        sys.exit(report_error(e))
    except OSError as e:
        sys.exit(report_os_error(e))
    except KeyboardInterrupt:
        _err().print("interrupted")
        sys.exit(130)
