"""Replace a file whole or not at all: the one way fleetgen writes a file of state.

A temporary file beside the target, fsynced, renamed over it, the directory fsynced: a reader sees
the old file or the new one, and after a crash or power loss the new one is there whole or not at
all. Raises OSError; the callers say what it means for their file (journal/outdir.py: OutputError).
Apart from every stage (a module of its own at the top) so fleet/, mix/, generate/ and run/ all use it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO


def temp_path(path: Path) -> Path:
    """The temporary file beside `path`: one per process, as shards write files of one directory side by side."""
    return path.with_name(f"{path.name}.{os.getpid()}.tmp")


@contextmanager
def atomic_file(path: Path, *, durable: bool = True) -> Iterator[BinaryIO]:
    """A binary file to write; on a clean exit it replaces `path`, on an exception it is removed.

    durable=False skips the fsyncs: only for files a reader checks and can rebuild (a snapshot with a
    checksum, a live status view), where a crash may lose the new file but never makes a row wrong.
    """
    path = Path(path)
    tmp = temp_path(path)
    try:
        with open(tmp, "wb") as f:
            yield f
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a half-written temporary file must not stay behind
        raise
    if durable:
        fsync_dir(path.parent)


def write_atomic(path: Path, data: bytes | str, *, durable: bool = True) -> None:
    """Replace `path` with `data` (str is written as UTF-8), as atomic_file does."""
    with atomic_file(path, durable=durable) as f:
        f.write(data.encode() if isinstance(data, str) else data)


def commit(tmp: Path, path: Path) -> None:
    """Make a temporary file some other writer filled (pyarrow, a streamed rewrite) durable, then `path`."""
    with open(tmp, "rb+") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(Path(path).parent)


def fsync_dir(d: Path) -> None:
    """Make a rename or a new file in `d` durable: without it a crash can lose the directory entry."""
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
