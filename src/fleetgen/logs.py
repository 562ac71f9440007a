"""fleetgen's logging: the library logs to `fleetgen.*` loggers; only a process's entry point chooses the handler.

The CLI installs a rich one (cli/_logging.py). A process fleetgen starts for itself (a shard's child)
installs `plain` at the level its parent passed down (`child_env`). A program that calls the library
sees warnings through Python's last-resort handler and the rest once it configures logging.
"""

from __future__ import annotations

import logging
import os
import sys

ROOT = "fleetgen"
LEVEL_ENV = "FLEETGEN_LOG_LEVEL"


def prefix(levelno: int) -> str:
    """How a record's level reads at the start of its line: notes (INFO) plain, the rest named."""
    if levelno >= logging.ERROR:
        return "error: "
    if levelno >= logging.WARNING:
        return "warning: "
    return "" if levelno >= logging.INFO else "debug: "


def level_of(*, quiet: bool = False, verbose: int = 0) -> int:
    """--quiet: warnings and errors only; default: notes too; -v: debug."""
    return logging.WARNING if quiet else logging.DEBUG if verbose else logging.INFO


def install(handler: logging.Handler, level: int) -> None:
    """Make `handler` the one handler of the `fleetgen` logger (one installed before is replaced), at `level`."""
    logger = logging.getLogger(ROOT)
    for old in [h for h in logger.handlers if getattr(h, "_fleetgen", False)]:
        logger.removeHandler(old)
    handler._fleetgen = True  # type: ignore[attr-defined]
    logger.addHandler(handler)
    logger.setLevel(level)


def child_env() -> dict[str, str]:
    """The environment entry that gives a child process this process's level."""
    return {LEVEL_ENV: str(logging.getLogger(ROOT).getEffectiveLevel())}


class _Plain(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return prefix(record.levelno) + super().format(record)


def install_plain() -> None:
    """Lines on stderr, at the level the parent passed in FLEETGEN_LOG_LEVEL (default: notes and up)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Plain("%(message)s"))
    try:
        level = int(os.environ.get(LEVEL_ENV, logging.INFO))
    except ValueError:
        level = logging.INFO
    install(handler, level)
