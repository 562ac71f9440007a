"""Every identity an output directory was run with, so a row always says which job made it.

job.json holds the job's identity (prompt file, model, sampling) and a resume with another one is
refused unless forced. `--force` then rewrites job.json, and the rows made before sit under an
identity they were not made with. So each identity is also appended, once, to job-history.jsonl
(its short digest, when it was first used, whether it was forced, the identity itself), and every
row and per-sample error carries the digest of the identity it was made with (`job`). A report then
counts rows per identity (report/identities.py); rows written before this tag existed have none.

Shards of one job append side by side: the append holds an flock on the history, and a reader keeps
the first line of each digest, so a line written twice (a filesystem without flock) costs nothing.
"""

from __future__ import annotations

import datetime
import fcntl
import hashlib
import os
from pathlib import Path
from typing import Any

import orjson

HISTORY = "job-history.jsonl"


def identity_digest(identity: Any) -> str:
    """A short, stable name of one job identity: 12 hex digits of the SHA-256 of its sorted JSON."""
    return hashlib.sha256(orjson.dumps(identity, option=orjson.OPT_SORT_KEYS)).hexdigest()[:12]


def record_identity(outdir: Path, identity: dict[str, Any], *, previous: Any = None, forced: bool = False) -> str:
    """Append `identity` to the history unless it is there; returns its digest.

    `previous` is the identity job.json held before (None: none or unreadable); `forced`: this run
    replaced it under --force. A directory made before the history existed gets the previous identity
    first, with no date: its rows are the untagged ones.
    """
    digest = identity_digest(identity)
    path = Path(outdir) / HISTORY
    with open(path, "a+b") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # released when the file closes
        f.seek(0)
        known = {e["job"] for e in _parse(f.read())}
        lines = []
        if not known and isinstance(previous, dict) and previous != identity:
            lines.append({"job": identity_digest(previous), "since": None, "forced": False, "identity": previous})
        if digest not in known:
            now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
            lines.append({"job": digest, "since": now, "forced": forced, "identity": identity})
        if lines:
            f.write(b"".join(orjson.dumps(e) + b"\n" for e in lines))
            f.flush()
            os.fsync(f.fileno())
    return digest


def read_history(outdir: Path) -> list[dict[str, Any]]:
    """The identities the directory was run with, oldest first, one per digest; [] when there is no history."""
    try:
        data = (Path(outdir) / HISTORY).read_bytes()
    except OSError:
        return []
    return _parse(data)


def _parse(data: bytes) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for line in data.splitlines():
        try:
            entry = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue  # a torn last line (a crash mid-append): the next run appends its identity again
        if isinstance(entry, dict) and isinstance(entry.get("job"), str) and entry["job"] not in seen:
            seen.add(entry["job"])
            out.append(entry)
    return out
