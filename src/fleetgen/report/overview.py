"""The report's overview table and its per-run table: totals over every row, and each run of the output."""

from __future__ import annotations

from fleetgen.report.data import Run
from fleetgen.report.document import Document
from fleetgen.report.runs import Span, when


def overview_section(doc: Document, run: Run, spans: list[Span], unrecorded: list) -> None:
    doc.heading("Overview")
    n = len(run.rows)
    doc.text(
        f"Totals over every row of the output: {n} result rows (results*.jsonl) and {sum(run.errors.values())} "
        f"error rows (errors*.jsonl), made by {_runs_phrase(spans, unrecorded)}."
    )
    truncated = sum(r.truncated for r in run.rows)
    rows: list[list[object]] = [
        ["output directory", f"`{run.outdir}`"],
        ["results (id, sample)", n],
        ["distinct prompts", len({r.id for r in run.rows})],
        ["error rows", sum(run.errors.values())],
        [f"completion tokens (all {n} result rows)", sum(r.completion_tokens for r in run.rows)],
        [f"prompt tokens (all {n} result rows)", sum(r.prompt_tokens for r in run.rows)],
        [f"truncated rows (a turn hit its token budget; all {n} result rows)", truncated],
    ]
    if spans:
        wall = sum(s.wall_s for s in spans)
        killed = sum(s.killed for s in spans)
        tokens = sum(s.completion_tokens for s in spans)
        rows += [
            [
                f"generate wall time (s), the sum of the {len(spans)} runs"
                + (f" ({killed} killed: counted to their last row)" if killed else ""),
                round(wall, 1),
            ],
            [
                "elapsed (s), first run's start to last run's end (the time between runs included)",
                round(spans[-1].end - spans[0].started_at, 1),
            ],
            [
                f"output tokens / s over the runs' wall time ({tokens} tokens of the recorded runs' rows)",
                round(tokens / wall, 1) if wall > 0 else "-",
            ],
            ["last run", spans[-1].outcome],
        ]
    elif run.stats:
        s = run.stats
        rows += [
            ["wall time (s), the last run only (stats.json: this output has no runs.jsonl)", s.get("wall_s")],
            ["output tokens / s, the last run only", s.get("output_tokens_per_s")],
            ["last run", s.get("stopped_reason") or "finished"],
        ]
    if run.job:
        rows.append(["model", run.job.get("model")])
        sampling = run.job.get("sampling") or {}
        rows.append(["sampling", ", ".join(f"{k}={v}" for k, v in sampling.items() if k != "profiles")])
        if sampling.get("profiles"):
            rows.append(["sampling profiles", ", ".join(str(p.get("name")) for p in sampling["profiles"])])
        prompts = run.job.get("prompts") or {}
        rows.append(["prompt set", f"{prompts.get('rows')} rows, sha256 {str(prompts.get('sha256'))[:12]}…"])
    if run.corrupt_lines:
        rows.append(["corrupt result lines skipped", run.corrupt_lines])
    doc.table(["", "value"], rows)


def _runs_phrase(spans: list[Span], unrecorded: list) -> str:
    if not spans:
        return "runs this output does not record (it has no runs.jsonl: written before fleetgen recorded its runs)"
    text = f"{len(spans)} run{'s' if len(spans) > 1 else ''} (the table below)"
    return text + (f" and earlier runs it does not record ({len(unrecorded)} rows)" if unrecorded else "")


def runs_section(doc: Document, run: Run, spans: list[Span], unrecorded: list) -> None:
    if not spans:
        return
    doc.heading("Runs")
    doc.text(
        "Each generate run of this output (runs.jsonl; the shards of one command are one run). A row belongs to "
        "the run during which it was sent. Wall time: the run's own clock; for a run killed without an end, its "
        "start to its last row. Rows and tokens of the runs add up to the totals above."
    )
    table: list[list[object]] = []
    for s in spans:
        tok = s.completion_tokens
        table.append(
            [
                s.index,
                when(s.started_at),
                when(s.end),
                round(s.wall_s, 1),
                len(s.rows),
                tok,
                round(tok / s.wall_s, 1) if s.wall_s > 0 else "-",
                ", ".join(f"`{j}`" for j in s.jobs) or "-",
                s.outcome,
                ", ".join(sorted({f"{r.host}:{r.pid}" for r in s.records}))
                if len(s.records) <= 4
                else f"{len(s.records)} processes",
            ]
        )
    if unrecorded:
        table.append(
            [
                "-",
                "-",
                "-",
                "-",
                len(unrecorded),
                sum(r.completion_tokens for r in unrecorded),
                "-",
                "-",
                "rows of runs not in runs.jsonl (an older fleetgen, or its start not written)",
                "-",
            ]
        )
    table.append(
        [
            "all",
            when(spans[0].started_at),
            when(spans[-1].end),
            round(sum(s.wall_s for s in spans), 1),
            len(run.rows),
            sum(r.completion_tokens for r in run.rows),
            "-",
            "-",
            "",
            "",
        ]
    )
    doc.table(
        [
            "run",
            "start (UTC)",
            "end (UTC)",
            "wall (s)",
            "result rows",
            "completion tokens",
            "output tok/s",
            "identity (job)",
            "how it ended",
            "host:pid",
        ],
        table,
    )
