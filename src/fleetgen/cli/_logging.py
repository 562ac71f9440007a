"""The CLI's handler of fleetgen's log records: one line each on stderr's rich console, the level named and coloured.

Not rich.logging.RichHandler: it lays a record out as table columns (time, level, path) and wraps
the message at 80 columns when stderr is not a terminal, so a logged path could not be grepped
from a log file. Rich is imported at the first record, not at start (`fleetgen --help` stays fast).
"""

from __future__ import annotations

import functools
import logging

from fleetgen.logs import install, level_of, prefix

_STYLE = {logging.ERROR: "bold red", logging.WARNING: "yellow", logging.INFO: "", logging.DEBUG: "dim"}


@functools.cache
def _console():
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


class ConsoleHandler(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        try:
            from rich.text import Text

            head = prefix(record.levelno)
            style = _STYLE.get(record.levelno, "")
            line = Text(head, style=style) + Text(self.format(record))
            _console().print(line)
        except Exception:
            self.handleError(record)


def setup(*, quiet: bool = False, verbose: int = 0) -> None:
    """Install the console handler at the level the flags ask for."""
    install(ConsoleHandler(), level_of(quiet=quiet, verbose=verbose))
