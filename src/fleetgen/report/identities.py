"""The report's job identities: which identity (prompts, model, sampling) made how many rows.

A forced resume (`generate --force`) changes the job under rows already written; job-history.jsonl
keeps every identity and each row its digest (rows/history.py), so the counts here say how
much of the output each one made. Rows from a fleetgen that did not tag them count as untagged.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from fleetgen.report.data import Run
from fleetgen.report.document import Document

UNTAGGED = "untagged"


def identity_rows(run: Run) -> list[dict[str, Any]]:
    """One entry per identity (history order, then any digest only the rows name, then untagged) with its counts."""
    results = Counter(r.job for r in run.rows)
    errors = run.error_jobs
    entries = [
        {"job": e["job"], "since": e.get("since"), "forced": bool(e.get("forced")), "identity": e.get("identity")}
        for e in run.history
    ]
    known = {e["job"] for e in entries}
    for digest in sorted(d for d in set(results) | set(errors) if d is not None and d not in known):
        entries.append({"job": digest, "since": None, "forced": False, "identity": None})  # history lost or edited
    if results.get(None) or errors.get(None):
        entries.append({"job": UNTAGGED, "since": None, "forced": False, "identity": None})
    for e in entries:
        key = None if e["job"] == UNTAGGED else e["job"]
        e["results"], e["errors"] = results.get(key, 0), errors.get(key, 0)
    return entries


def _what(identity: Any, first: Any) -> str:
    """The identity in a few words: what differs from the first one, or its model and prompts for the first."""
    if not isinstance(identity, dict):
        return "-"
    if identity is first or not isinstance(first, dict):
        prompts = identity.get("prompts") or {}
        return (
            f"model {identity.get('model')}, {prompts.get('rows')} prompts (sha256 {str(prompts.get('sha256'))[:12]}…)"
        )
    changed = []
    for key in sorted(set(identity) | set(first)):
        a, b = first.get(key), identity.get(key)
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            changed += [
                f"{key}.{k} {a.get(k)!r} → {b.get(k)!r}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)
            ]
        else:
            changed.append(f"{key} {a!r} → {b!r}")
    return "; ".join(changed) or "same"


def identities_section(doc: Document, run: Run) -> None:
    entries = identity_rows(run)
    if not entries:
        return
    doc.heading("Job identity")
    if len(entries) > 1:
        doc.text(
            "This output was made by more than one job identity (a resume under `--force`, or rows from before "
            "identities were tagged): each row carries the digest of the one that made it."
        )
    first = entries[0]["identity"]
    doc.table(
        ["job", "since", "forced", "identity", "result rows", "error rows"],
        [
            [
                f"`{e['job']}`",
                e["since"] or "-",
                "yes" if e["forced"] else "",
                _what(e["identity"], first),
                e["results"],
                e["errors"],
            ]
            for e in entries
        ],
    )
