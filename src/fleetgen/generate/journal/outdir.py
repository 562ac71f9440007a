"""The output directory's OS boundary (create it, replace a file whole, an OSError told as what to do): apart, as the
journal, lease, identity and completion mark all write there."""

from __future__ import annotations

import errno
from pathlib import Path

from fleetgen import atomic
from fleetgen.errors import InputError, OutputError


def write_atomic(path: Path, data: bytes) -> None:
    """fleetgen.atomic.write_atomic into the output directory, an OSError told as what to do (OutputError)."""
    try:
        atomic.write_atomic(path, data)
    except OSError as e:
        raise output_error(path, e) from None


_WHAT_TO_DO = {
    errno.ENOSPC: "free space on that disk, then run the same command again to resume",
    errno.EDQUOT: "free space within your quota, then run the same command again to resume",
    errno.EROFS: "make the directory writable (or pass another --output), then run the same command again to resume",
    errno.EACCES: "make the directory writable (or pass another --output), then run the same command again to resume",
    errno.EPERM: "make the directory writable (or pass another --output), then run the same command again to resume",
    errno.ENOENT: "the output directory was removed: restore it, or run again to start it anew",
}


def make_output_dir(outdir: Path) -> Path:
    """The output directory, created if need be; an InputError saying what to do if it cannot be."""
    outdir = Path(outdir)
    try:
        outdir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(
            f"cannot create output directory {outdir}: {e.strerror}",
            hint="pass -o a directory (new or existing) you can write to, not a file",
        ) from None
    return outdir


def output_error(path: Path, e: OSError) -> OutputError:
    """An OSError on the output directory, with the file, the cause and what to do."""
    cause = e.strerror or str(e)
    name = errno.errorcode.get(e.errno or 0, "")
    return OutputError(
        f"cannot write {path}: {cause}{f' ({name})' if name else ''}; every line written before is complete",
        hint=_WHAT_TO_DO.get(e.errno or 0, "fix the output directory, then run the same command again to resume"),
    )
