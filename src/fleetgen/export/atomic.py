"""Several output files written whole or not at all, each through fleetgen.atomic (temporary file, fsync, rename)."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import IO

from fleetgen.atomic import commit, temp_path
from fleetgen.errors import InputError


class AtomicFiles:
    """Open temporary files for several targets; `commit` renames them all, anything else removes them.

    Used as a context manager: leaving the block by an exception (Ctrl-C included) unlinks every temp
    file, so an interrupted export leaves the old files (or none), never half a file.
    """

    def __init__(self, targets: dict[str, Path], *, overwrite: bool) -> None:
        self.targets = targets
        self.temps = {k: temp_path(p) for k, p in targets.items()}
        self._overwrite = overwrite
        self._stack = ExitStack()
        self._committed = False

    def __enter__(self) -> AtomicFiles:
        for target in self.targets.values():
            if target.exists() and not self._overwrite:
                raise InputError(f"{target} already exists", hint="pass --overwrite or choose another --output")
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise InputError(f"cannot create {target.parent}: {e.strerror}") from None
        return self

    def open(self, key: str) -> IO[bytes]:
        """The temporary file for `key`, opened for binary writing; closed by commit or on error."""
        return self._stack.enter_context(open(self.temps[key], "wb"))

    def path(self, key: str) -> Path:
        """The temporary path for `key`, for writers (pyarrow) that open files themselves."""
        return self.temps[key]

    def commit(self) -> None:
        self._stack.close()
        for key, tmp in self.temps.items():
            if tmp.exists():
                commit(tmp, self.targets[key])
        self._committed = True

    def __exit__(self, *exc: object) -> None:
        self._stack.close()
        if not self._committed:
            for tmp in self.temps.values():
                tmp.unlink(missing_ok=True)
