"""Which job an output directory belongs to (job.json): apart, so a
resume refuses another job's directory before it reads any of it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from fleetgen.errors import ResumeMismatchError
from fleetgen.generate.journal.outdir import output_error, write_atomic
from fleetgen.rows.history import HISTORY, record_identity

JOB = "job.json"


def check_identity(outdir: Path, identity: dict[str, Any], *, force: bool) -> str:
    """Record the job's identity, or refuse to resume a directory that belongs to another job.

    Returns the identity's digest, which every row of this run carries; job-history.jsonl keeps
    each identity the directory was run with (rows/history.py), so a forced run loses none.
    """
    path = outdir / JOB
    recorded, forced = None, False
    if path.exists():
        try:
            recorded = orjson.loads(path.read_bytes())
        except orjson.JSONDecodeError:
            recorded = None
        if recorded != identity:
            diffs = _identity_diff(recorded, identity)
            if not force:
                raise ResumeMismatchError(
                    f"{outdir} holds a different job: {diffs}",
                    hint="use the original settings, another --output directory, or --force to resume anyway",
                )
            forced = True
    try:
        digest = record_identity(outdir, identity, previous=recorded, forced=forced)
    except OSError as e:
        raise output_error(outdir / HISTORY, e) from None
    write_atomic(path, orjson.dumps(identity, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
    return digest


def _identity_diff(old: Any, new: dict[str, Any]) -> str:
    if not isinstance(old, dict):
        return "job.json is unreadable"
    parts = []
    flat_old, flat_new = _flatten(old), _flatten(new)
    for key in sorted(set(flat_old) | set(flat_new)):
        if flat_old.get(key) != flat_new.get(key):
            parts.append(f"{key} was {flat_old.get(key)!r}, now {flat_new.get(key)!r}")
    return "; ".join(parts)


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out
