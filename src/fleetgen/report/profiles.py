"""The report's per-profile table: rows, lengths and finish reasons of each sampling profile."""

from __future__ import annotations

from collections import Counter

import numpy as np

from fleetgen.report.data import Run
from fleetgen.report.document import Document


def profiles_section(doc: Document, run: Run) -> None:
    """A section only for a job with sampling profiles (rows carry `profile`)."""
    by: dict[str, list] = {}
    for r in run.rows:
        if r.profile is not None:
            by.setdefault(r.profile, []).append(r)
    if not by:
        return
    declared = [p.get("name") for p in ((run.job or {}).get("sampling") or {}).get("profiles") or []]
    doc.heading("Sampling profiles")
    doc.text("Each (id, sample) got one profile by weight (a stable hash); the row records the parameters sent.")
    total = sum(len(v) for v in by.values())
    table = []
    for name in [n for n in declared if n in by] + sorted(set(by) - set(declared)):
        rs = by[name]
        out = [r.completion_tokens for r in rs]
        finish = Counter(f for r in rs for f in r.finish)
        turns = sum(finish.values()) or 1
        table.append(
            [
                name,
                len(rs),
                f"{100 * len(rs) / total:.1f}%",
                int(np.median(out)),
                int(np.percentile(out, 95)),
                ", ".join(f"{k} {100 * v / turns:.0f}%" for k, v in finish.most_common()),
            ]
        )
    for name in declared:
        if name not in by:
            table.append([name, 0, "0.0%", "-", "-", "-"])
    doc.table(["profile", "rows", "share", "median out tok", "p95 out tok", "finish reasons (turns)"], table)
