"""The prompt file's fingerprint, remembered beside the output by the file's stat: a resume need not hash it again.

The job's identity holds the sha256 of the prompt file (journal.check_identity refuses another
job's directory); hashing it grows with the file and was most of a large resume's wall (BENCHMARKS.md). The output
directory keeps `prompts.stamp`: the sha256 and row count with the file's device, inode, size,
mtime and ctime (nanoseconds). When all five still match, the file was not written since (a write
moves ctime, which no user call can set back; a replaced file has another inode or ctime), and the
stored hash is used. Like git's index, a stamp is written only for a file last changed more than
`RACY_S` before the hash was taken: an edit within the same timestamp tick could otherwise go
unseen on a file system with coarse timestamps. Advisory: an unreadable or missing stamp means
hashing the file, as without it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import orjson

from fleetgen.atomic import write_atomic
from fleetgen.generate.prompts.reader import fingerprint

STAMP = "prompts.stamp"
RACY_S = 2.0


def _stat_key(path: Path) -> list[int]:
    st = os.stat(path)
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def stamped_fingerprint(path: Path, outdir: Path) -> tuple[str, int]:
    """fingerprint(path), from `outdir`'s stamp when the file's stat still matches it, else hashed (and stamped)."""
    path = Path(path)
    stamp = Path(outdir) / STAMP
    key = _stat_key(path)
    try:
        saved = orjson.loads(stamp.read_bytes())
        if saved.get("path") == str(path.resolve()) and saved.get("stat") == key:
            return saved["sha256"], saved["rows"]
    except (OSError, orjson.JSONDecodeError, AttributeError, KeyError, TypeError):
        pass
    started = time.time_ns()
    sha, rows = fingerprint(path)
    if _stat_key(path) == key and max(key[3], key[4]) < started - int(RACY_S * 1e9) and stamp.parent.is_dir():
        try:
            write_atomic(stamp, orjson.dumps({"path": str(path.resolve()), "stat": key, "sha256": sha, "rows": rows}))
        except OSError:
            pass  # a cache: the next run hashes the file again
    return sha, rows
