"""The mark a finished run leaves: a resume of an output nothing touched since has nothing to do, and knows it at once.

A run that ends with every prompt row resolved (each sample in the results or errors, each bad row
recorded) writes complete.json: the job's identity, the samples per prompt, what the next resume
would count as already done, and the exact size and a CRC of the tail of every journal file. A
later run of the same job trusts it only while all of that still matches; any write to the
journal (a retry, a forced run with other settings, an edit) changes a size or a tail and the run
takes the normal path. The mark only ever saves reading the prompts; it claims no row itself.
"""

from __future__ import annotations

import os
import zlib
from pathlib import Path
from typing import Any

import orjson

COMPLETE = "complete.json"
_TAIL = 4096


def _file_print(path: Path) -> list[int]:
    """[size, CRC32 of the last 4 KiB] of a journal file ([0, 0] when absent)."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            f.seek(max(0, size - _TAIL))
            return [size, zlib.crc32(f.read())]
    except FileNotFoundError:
        return [0, 0]


def _prints(outdir: Path, files: list[str]) -> dict[str, list[int]]:
    return {name: _file_print(outdir / name) for name in files}


def mark_complete(
    outdir: Path, identity: dict[str, Any], samples: int, resumed: int, files: list[str], name: str = COMPLETE
) -> None:
    """Record that this job's journal files, as they are now, resolve every prompt row."""
    from fleetgen.generate.journal.outdir import write_atomic

    mark = {"identity": identity, "samples": samples, "resumed": resumed, "files": _prints(outdir, files)}
    write_atomic(outdir / name, orjson.dumps(mark, option=orjson.OPT_SORT_KEYS))


def read_complete(
    outdir: Path, identity: dict[str, Any], samples: int, files: list[str], name: str = COMPLETE
) -> int | None:
    """What a resume would count as done, when the mark matches this job and these files exactly; else None."""
    try:
        mark = orjson.loads((outdir / name).read_bytes())
    except (FileNotFoundError, orjson.JSONDecodeError):
        return None
    if not isinstance(mark, dict) or mark.get("identity") != orjson.loads(orjson.dumps(identity)):
        return None
    if mark.get("samples") != samples or mark.get("files") != _prints(outdir, files):
        return None
    resumed = mark.get("resumed")
    return resumed if isinstance(resumed, int) else None
