"""Cutting a torn last line off a journal file: apart, as it is the one edit a resume makes to what a crash left."""

from __future__ import annotations

import os
from pathlib import Path

import orjson

from fleetgen.generate.journal.keyindex import line_start


def repair(path: Path) -> int:
    """Cut a torn or unparsable tail so the file ends with a complete line; returns bytes removed."""
    if not path.exists():
        return 0
    size = path.stat().st_size
    with open(path, "rb+") as f:
        keep = size
        while keep > 0:
            start = line_start(f, keep)
            f.seek(keep - 1)
            if f.read(1) == b"\n":
                f.seek(start)
                try:
                    orjson.loads(f.read(keep - start))
                    break
                except orjson.JSONDecodeError:
                    pass
            keep = start
        if keep != size:
            f.truncate(keep)
            f.flush()
            os.fsync(f.fileno())
    return size - keep
