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

from fleetgen.models.tokenizer import find_tokenizer, load_local
from fleetgen.report import plots
from fleetgen.report.capture import capture_section
from fleetgen.report.data import Run, load_run
from fleetgen.report.document import Document, pct
from fleetgen.report.identities import identities_section
from fleetgen.report.overview import overview_section, runs_section
from fleetgen.report.profiles import profiles_section
from fleetgen.report.replicas import replica_table
from fleetgen.report.runs import attribute
from fleetgen.report.tokens import reasoning_section, token_ids_section
from fleetgen.report.tool_turns import tool_turns_section
from fleetgen.rows.capture_journal import find_captures, read_capture
from fleetgen.rows.markup import THINK_CLOSE
from fleetgen.rows.runs import read_runs


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
    captures: list[Path] | None = None,
) -> Path:
    """Write report.md (and report.html) with its PNGs into `dest` (default OUTDIR/report); returns report.md.

    `tokenizer`: a model directory (or an embedded name, or a hub id in the local cache) to read the
    tokenizer from; `fleet_model`: the fleet's model path, tried next, else the one the runs recorded
    (runs.jsonl). Nothing is fetched from a hub. `captures`: capture outputs of these results to count
    (default: those beside OUTDIR whose capture.json names it as their source).
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

    overview_section(doc, run, spans, unrecorded)
    runs_section(doc, run, spans, unrecorded)
    identities_section(doc, run)
    target = _mix_target(run)
    doc.heading("Mix")
    doc.text(
        f"Share of prompt ids per `meta.domain`, over every result row ({len(run.rows)})"
        + (", against the mix recipe's target." if target else ".")
    )
    plots.place(doc, plots.mix_shares(run, dest / "mix_shares.png", target), "mix shares")
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
    plots.place(doc, plots.throughput(run, dest / "throughput.png", spans), "throughput over time per replica")
    replica_table(doc, run, spans)

    doc.heading("Lengths")
    doc.text(
        f"Over every result row ({len(run.rows)}); completion tokens as the server counted them (usage), which "
        "are the sampled ids the rows record."
    )
    plots.place(
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
    plots.place(
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
    reasoning_section(doc, run, dest, source, tok)

    doc.heading("Finish reasons")
    fr = Counter(f for r in run.rows for f in r.finish)
    doc.text(f"Every regenerated turn of every result row ({sum(fr.values())} turns in {len(run.rows)} rows).")
    plots.place(doc, plots.finish_by_domain(run, dest / "finish_reasons.png"), "finish reasons by domain")
    total = sum(fr.values()) or 1
    doc.table(["finish_reason", "turns", "share"], [[k, v, pct(100 * v / total)] for k, v in fr.most_common()])

    token_ids_section(doc, run, source, tok)
    profiles_section(doc, run)
    tool_turns_section(doc, run)
    found = find_captures(outdir) if captures is None else [Path(c) for c in captures]
    capture_section(doc, [read_capture(c) for c in found], len(run.rows))

    doc.heading("Errors")
    if run.errors:
        doc.text(f"Every row of errors*.jsonl ({sum(run.errors.values())}), by reason.")
        plots.place(doc, plots.error_reasons(run, dest / "error_reasons.png"), "error reasons")
        doc.table(["reason", "rows", "example"], [[k, v, run.error_examples[k]] for k, v in run.errors.most_common()])
    else:
        doc.text("No rows in errors.jsonl.")

    (dest / "report.md").write_text(doc.markdown(), encoding="utf-8")
    if html:
        (dest / "report.html").write_text(doc.html(), encoding="utf-8")
    return dest / "report.md"


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
                pct(100 * len(ids) / n_prompts),
                pct(100 * target.get(d, 0)) if target else "-",
                len(rs),
                int(np.median(out)),
                int(np.percentile(out, 95)),
                pct(100 * stop),
            ]
        )
    doc.table(
        ["domain", "prompts", "share", "mix target", "rows", "median out tok", "p95 out tok", "finished (stop)"], rows
    )
