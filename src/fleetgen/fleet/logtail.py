"""Follow a replica's log file without holding it all in memory."""

from __future__ import annotations

from collections import deque
from pathlib import Path


class LogFollower:
    def __init__(self, path: Path, keep: int = 400) -> None:
        self.path = path
        self._offset = 0
        self._partial = ""
        self._recent: deque[str] = deque(maxlen=keep)

    async def new_lines(self) -> list[str]:
        """Complete lines appended since the last call (progress bars' carriage returns split too)."""
        chunk = await self._read_from(self._offset)
        self._offset += len(chunk)
        text = self._partial + chunk.decode("utf-8", errors="replace").replace("\r", "\n")
        *lines, self._partial = text.split("\n")
        lines = [ln for ln in lines if ln.strip()]
        self._recent.extend(lines)
        return lines

    async def _read_from(self, offset: int) -> bytes:
        """The bytes after `offset`; subclasses read logs that live elsewhere (another node), awaiting the far side."""
        try:
            with open(self.path, "rb") as f:
                f.seek(offset)
                return f.read()
        except FileNotFoundError:
            return b""

    def tail(self, n: int) -> str:
        return "\n".join(list(self._recent)[-n:])
