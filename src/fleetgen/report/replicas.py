"""The report's per-replica table: rows by the replica that answered, requests and failures from the runs' counters."""

from __future__ import annotations

from collections import Counter

from fleetgen.report.data import Run
from fleetgen.report.document import Document
from fleetgen.report.runs import Span
from fleetgen.rows.stats_file import describe_silence


def replica_table(doc: Document, run: Run, spans: list[Span]) -> None:
    """Per replica: result rows from the rows themselves; requests and failures summed over the runs' own counters."""
    counted = [r for s in spans for r in s.records if r.stats]
    parts = [r.stats for r in counted] if spans else ([run.stats] if run.stats else [])
    reps: dict[str, dict] = {}
    for stats in parts:
        wall = float(stats.get("wall_s") or 0.0)
        for r in stats.get("replicas") or []:
            key = str(r.get("endpoint"))
            agg = reps.setdefault(
                key,
                {
                    "endpoint": key,
                    "index": r.get("index"),
                    "requests": 0,
                    "ok": 0,
                    "failures": 0,
                    "completion_tokens": 0,
                    "ejections": 0,
                    "engine_preemptions": 0,
                    "moved": 0,
                    "wall": 0.0,
                    "low": None,
                    "high": None,
                    "gone": [],
                },
            )
            for k in ("requests", "ok", "failures", "completion_tokens", "ejections", "engine_preemptions", "moved"):
                agg[k] += int(r.get(k) or 0)
            agg["wall"] += wall
            low, high = r.get("window_range") or (None, None)
            if low is not None:
                agg["low"] = low if agg["low"] is None else min(agg["low"], low)
                agg["high"] = high if agg["high"] is None else max(agg["high"], high)
            if r.get("stopped_answering"):
                agg["gone"].append(r["stopped_answering"])
    rows_by = Counter(rep for row in run.rows for rep in row.replicas)
    if not reps and not rows_by:
        return
    if spans:
        missing = sum(1 for s in spans for r in s.records if not r.stats)
        scope = f"summed over the {len(counted)} run process(es) that recorded their end" + (
            f" ({missing} killed before theirs: not counted here, their rows are)" if missing else ""
        )
    else:
        scope = "the last run only (stats.json; this output has no runs.jsonl)"
    doc.text(
        f"Result rows per replica: every result row, by the replica that answered. Requests, failures, tokens, "
        f"ejections: {scope}. In-flight limit: the range it moved in."
    )
    table = []
    for key in sorted(set(reps) | set(rows_by)):
        a = reps.get(key)
        if a is None:
            table.append([key, rows_by.get(key, 0)] + ["-"] * 9)
            continue
        table.append(
            [
                key,
                rows_by.get(key, 0),
                f"{a['low']}-{a['high']}" if a["low"] is not None else "-",
                a["requests"],
                a["ok"],
                a["failures"],
                a["completion_tokens"],
                round(a["completion_tokens"] / a["wall"], 1) if a["wall"] > 0 else "-",
                a["ejections"],
                a["engine_preemptions"],
                a["moved"],
            ]
        )
    doc.table(
        [
            "replica",
            "result rows",
            "in-flight limit (range)",
            "requests",
            "ok",
            "failures",
            "completion tokens",
            "output tok/s",
            "ejections",
            "engine preemptions",
            "moved",
        ],
        table,
    )
    for key, a in reps.items():
        for gone in a["gone"]:
            doc.text(f"Replica {a['index']} ({key}) stopped answering {describe_silence(gone)}.")
