"""Print tables whole where no terminal is watching: a log or a pipe gets the table's natural width."""

from __future__ import annotations

from rich.console import Console, RenderableType
from rich.measure import Measurement

# Wider than any table fleetgen prints; only bounds the measurement.
_MAX_WIDTH = 1000


def print_whole(console: Console, renderable: RenderableType) -> None:
    """On a terminal, fit its width; elsewhere never crop cells to rich's 80-column default."""
    if console.is_terminal:
        console.print(renderable)
        return
    natural = Measurement.get(console, console.options.update(max_width=_MAX_WIDTH), renderable).maximum
    if natural <= console.width:
        console.print(renderable)
        return
    wide = Console(file=console.file, width=natural, color_system=None, highlight=False)
    wide.print(renderable)
