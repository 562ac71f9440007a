"""`build_report`: a run's results, errors and runs into report.md (and report.html) with PNG charts.

Every figure says what it covers. Totals count every row of the output (results*.jsonl, errors*.jsonl),
however many runs made them; wall time is the sum of the runs (runs.jsonl), beside the elapsed time
from the first start to the last end; a per-run table gives each run's start, end, rows, tokens and
identity. Token counts come from the ids the rows record; the tokenizer, needed only to split
reasoning from answer tokens and to re-encode text, is read from local files (models/tokenizer.py).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

from fleetgen.models.tokenizer import LocalTokenizer, TokenizerSource, find_tokenizer, load_local
from fleetgen.report import plots
from fleetgen.report.data import Run, load_run
from fleetgen.report.document import Document
from fleetgen.report.identities import identities_section
from fleetgen.report.profiles import profiles_section
from fleetgen.report.runs import Span, attribute, when
from fleetgen.report.tool_turns import tool_turns_section
from fleetgen.rows.markup import THINK_CLOSE
from fleetgen.rows.runs import read_runs
from fleetgen.rows.stats_file import describe_silence

FIDELITY_TURNS = 5000  # turns a report re-encodes to show the run's own text round-trip mismatch


def _pct(p: float) -> str:
    return f"{p:.1f}%"


def _served_name(outdir: Path) -> str | None:
    import json

    try:
        return json.loads((Path(outdir) / "job.json").read_text(encoding="utf-8")).get("model")
    except (OSError, ValueError, AttributeError):
        return None


def build_report(
    outdir: Path,
    html: bool = False,
    *,
    dest: Path | None = None,
    mix_report: Path | None = None,
    tokenizer: str | None = None,
    fleet_model: str | None = None,
) -> Path:
    """Write report.md (and report.html) with its PNGs into `dest` (default OUTDIR/report); returns report.md.

    `tokenizer`: a model directory (or an embedded name, or a hub id in the local cache) to read the
    tokenizer from; `fleet_model`: the fleet's model path, tried next, else the one the runs recorded
    (runs.jsonl). Nothing is fetched from a hub.
    """
    outdir = Path(outdir)
    recorded = next((r.model_path for r in reversed(read_runs(outdir)) if r.model_path), None)  # the fleet's, per run
    source = find_tokenizer(tokenizer, fleet_model or recorded, _served_name(outdir))
    tok = load_local(source)
    think_close = tok.get_vocab().get(THINK_CLOSE) if tok is not None else None
    run = load_run(outdir, mix_report, think_close=think_close)
    dest = Path(dest) if dest else outdir / "report"
    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.glob("*.png"):  # a chart this report leaves out must not linger from an earlier one
        old.unlink()
    spans, unrecorded = attribute(run)
    doc = Document("fleetgen run report")

    _overview(doc, run, spans, unrecorded)
    _runs_section(doc, run, spans, unrecorded)
    identities_section(doc, run)
    target = _mix_target(run)
    doc.heading("Mix")
    doc.text(
        f"Share of prompt ids per `meta.domain`, over every result row ({len(run.rows)})"
        + (", against the mix recipe's target." if target else ".")
    )
    _image(doc, plots.mix_shares(run, dest / "mix_shares.png", target), "mix shares")
    _domain_table(doc, run, target)

    doc.heading("Throughput")
    doc.text(
        "Output tokens per second of every result row, spread over the time it was in flight, per replica"
        + (
            f"; the {len(spans)} runs placed end to end (the time between them left out), a dashed line where each "
            "run after the first starts."
            if len(spans) > 1
            else "."
        )
    )
    _image(doc, plots.throughput(run, dest / "throughput.png", spans), "throughput over time per replica")
    _replica_table(doc, run, spans)

    doc.heading("Lengths")
    doc.text(
        f"Over every result row ({len(run.rows)}); completion tokens as the server counted them (usage), which "
        "are the sampled ids the rows record."
    )
    _image(
        doc,
        plots.length_hist(
            run,
            dest / "output_lengths.png",
            "completion_tokens",
            "Output length by domain",
            "completion tokens per row (all regenerated turns)",
        ),
        "output lengths",
    )
    _image(
        doc,
        plots.length_hist(
            run,
            dest / "prompt_lengths.png",
            "prompt_tokens",
            "Prompt length by domain",
            "prompt tokens per row (summed over turns)",
        ),
        "prompt lengths",
    )
    _reasoning(doc, run, dest, source, tok)

    doc.heading("Finish reasons")
    fr = Counter(f for r in run.rows for f in r.finish)
    doc.text(f"Every regenerated turn of every result row ({sum(fr.values())} turns in {len(run.rows)} rows).")
    _image(doc, plots.finish_by_domain(run, dest / "finish_reasons.png"), "finish reasons by domain")
    total = sum(fr.values()) or 1
    doc.table(["finish_reason", "turns", "share"], [[k, v, _pct(100 * v / total)] for k, v in fr.most_common()])

    _token_ids(doc, run, source, tok)
    profiles_section(doc, run)
    tool_turns_section(doc, run)

    doc.heading("Errors")
    if run.errors:
        doc.text(f"Every row of errors*.jsonl ({sum(run.errors.values())}), by reason.")
        _image(doc, plots.error_reasons(run, dest / "error_reasons.png"), "error reasons")
        doc.table(["reason", "rows", "example"], [[k, v, run.error_examples[k]] for k, v in run.errors.most_common()])
    else:
        doc.text("No rows in errors.jsonl.")

    (dest / "report.md").write_text(doc.markdown(), encoding="utf-8")
    if html:
        (dest / "report.html").write_text(doc.html(), encoding="utf-8")
    return dest / "report.md"


def _image(doc: Document, chart: plots.Chart, alt: str) -> None:
    """The chart, or the line saying why it was left out."""
    if chart.path is not None:
        doc.image(chart.path.name, alt)
    else:
        doc.text(f"*No {alt} chart: {chart.why}.*")


def _overview(doc: Document, run: Run, spans: list[Span], unrecorded: list) -> None:
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


def _runs_section(doc: Document, run: Run, spans: list[Span], unrecorded: list) -> None:
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


def _reasoning(doc: Document, run: Run, dest: Path, source: TokenizerSource, tok: LocalTokenizer | None) -> None:
    with_reasoning = [r for r in run.rows if r.has_reasoning]
    if not with_reasoning:
        doc.text(
            "*No reasoning vs answer chart: no row has reasoning_content (the model wrote no reasoning, or the "
            "server ran no reasoning parser).*"
        )
        return
    counted = all(r.reasoning_tokens is not None for r in run.rows)
    if counted:
        unit, why = "tokens", "sampled ids, split at `</think>`"
    else:
        unit = "characters"
        why = (
            "tokens cannot be told apart without the tokenizer's `</think>` id: " + source.origin
            if tok is None
            else "some rows have no ids for a turn, or no `</think>` in a turn with reasoning"
        )
    doc.text(
        f"Mean reasoning and answer length per row, by domain, over every result row ({len(run.rows)}; "
        f"{len(with_reasoning)} with reasoning), in {unit} ({why})."
    )
    _image(doc, plots.reasoning_vs_answer(run, dest / "reasoning_vs_answer.png", unit), "reasoning vs answer")


def _token_ids(doc: Document, run: Run, source: TokenizerSource, tok: LocalTokenizer | None) -> None:
    """Turns with and without the server's token ids, and how often re-encoding their text would differ."""
    from fleetgen.export.fidelity import Mismatch, record_mismatch
    from fleetgen.export.results import iter_results

    doc.heading("Token ids")
    with_ids = sum(r.turns_with_ids for r in run.rows)
    without = sum(r.turns_without_ids for r in run.rows)
    rows: list[list[object]] = [
        ["regenerated turns with the server's token ids (all result rows)", with_ids],
        ["turns without (the tokens export re-tokenizes their rows)", without],
    ]
    why = Counter(w for r in run.rows for w in r.ids_missing)
    rows += [[f"  without: {reason}", n] for reason, n in sorted(why.items())]
    m = Mismatch()
    if with_ids and tok is not None:
        for rec in iter_results(run.outdir):
            m.add(record_mismatch(rec, tok))
            if m.turns >= FIDELITY_TURNS:
                break
    if m.turns:
        rows.append(
            [
                f"turns whose decoded text re-encodes to other ids (first {m.turns} turns with ids)",
                f"{m.turns_differing} ({_pct(100 * m.turn_share)})",
            ]
        )
        rows.append(
            ["sampled tokens a re-encoding would change", f"{m.tokens_affected} of {m.tokens} ({m.token_share:.2%})"]
        )
    rows.append(["tokenizer (for the round trip)", str(source.path) if tok is not None else f"none: {source.origin}"])
    doc.text(
        "Ids are what the server was fed and sampled (before reasoning and tool-call parsing); token exports use "
        "them as they are. A text round trip re-encodes to the canonical tokenization, which is not always the one "
        "sampled."
    )
    doc.table(["", "value"], rows)


def _mix_target(run: Run) -> dict[str, float] | None:
    if not run.mix:
        return None
    doms = run.mix.get("domains") or []
    total = sum(float(d.get("share") or 0) for d in doms) or 1.0
    return {d["domain"]: float(d.get("share") or 0) / total for d in doms if "domain" in d}


def _domain_table(doc: Document, run: Run, target: dict[str, float] | None) -> None:
    by: dict[str, list] = {}
    for r in run.rows:
        by.setdefault(r.domain, []).append(r)
    n_prompts = len({r.id for r in run.rows}) or 1
    rows = []
    for d in sorted(by):
        rs = by[d]
        ids = {r.id for r in rs}
        out = [r.completion_tokens for r in rs]
        stop = sum(f == "stop" for r in rs for f in r.finish) / max(1, sum(len(r.finish) for r in rs))
        rows.append(
            [
                d,
                len(ids),
                _pct(100 * len(ids) / n_prompts),
                _pct(100 * target.get(d, 0)) if target else "-",
                len(rs),
                int(np.median(out)),
                int(np.percentile(out, 95)),
                _pct(100 * stop),
            ]
        )
    doc.table(
        ["domain", "prompts", "share", "mix target", "rows", "median out tok", "p95 out tok", "finished (stop)"], rows
    )


def _replica_table(doc: Document, run: Run, spans: list[Span]) -> None:
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
