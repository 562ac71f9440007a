"""What a capture backend is: token rows in, each row's hidden states [seq, layers, hidden] out, as outcomes."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any

from fleetgen.capture.inputs import CaptureItem


@dataclass
class Captured:
    """An item's hidden states, one tensor [seq, layers, hidden] per row, in the layers' ascending order."""

    item: CaptureItem
    hidden: list[Any]
    seconds: float
    replica: str | None = None


@dataclass
class Failed:
    """An item the backend could not capture, and why; a later run tries it again."""

    item: CaptureItem
    reason: str


Outcome = Captured | Failed


class Backend:
    """Turns items into outcomes, in any order; `layers` are the capture indices (capture/layers.py)."""

    name = ""

    def __init__(self, layers: list[int]) -> None:
        self.layers = list(layers)

    def outcomes(self, items: Iterable[CaptureItem]) -> AsyncIterator[Outcome]:
        raise NotImplementedError

    async def aclose(self) -> None:
        return None
