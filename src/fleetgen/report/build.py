"""`build_report`: a run's results, errors and stats into report.md (and report.html) with PNG charts."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np

from fleetgen.rows.stats_file import describe_silence
from fleetgen.report import plots
from fleetgen.report.data import Run, load_run
from fleetgen.report.document import Document
from fleetgen.report.identities import identities_section
from fleetgen.report.profiles import profiles_section
from fleetgen.report.tool_turns import tool_turns_section


def _counter(run: Run, tokenizer: str | None) -> tuple[Callable[[str], int], str]:
    """Token counts with the target's tokenizer when it can be loaded locally, else characters."""
    name = tokenizer or run.model
    if name:
        try:
            from fleetgen.export.formats.tokens import load_tokenizer

            tok = load_tokenizer(name)
            return (lambda s: len(tok.encode(s, add_special_tokens=False)) if s else 0), "tokens"
        except Exception:  # no local tokenizer: characters are still a fair comparison
            pass
    return len, "characters"


FIDELITY_TURNS = 5000  # turns a report re-encodes to show the run's own text round-trip mismatch


def _pct(p: float) -> str:
    return f"{p:.1f}%"


def build_report(
    outdir: Path,
    html: bool = False,
    *,
    dest: Path | None = None,
    mix_report: Path | None = None,
    tokenizer: str | None = None,
) -> Path:
    """Write report.md (and report.html) with its PNGs into `dest` (default OUTDIR/report); returns report.md."""
    run = load_run(Path(outdir), mix_report)
    dest = Path(dest) if dest else Path(outdir) / "report"
    dest.mkdir(parents=True, exist_ok=True)
    count, unit = _counter(run, tokenizer)
    doc = Document("fleetgen run report")

    _overview(doc, run)
    identities_section(doc, run)
    target = _mix_target(run)
    doc.heading("Mix")
    doc.text("Share of prompt ids per `meta.domain`" + (" against the mix recipe's target." if target else "."))
    doc.image(plots.mix_shares(run, dest / "mix_shares.png", target).name, "mix shares")
    _domain_table(doc, run, target)

    doc.heading("Throughput")
    doc.image(plots.throughput(run, dest / "throughput.png").name, "throughput over time per replica")
    _replica_table(doc, run)

    doc.heading("Lengths")
    doc.image(
        plots.length_hist(run, dest / "output_lengths.png", "completion_tokens",
                          "Output length by domain", "completion tokens per row (all regenerated turns)").name,
        "output lengths",
    )
    doc.image(
        plots.length_hist(run, dest / "prompt_lengths.png", "prompt_tokens",
                          "Prompt length by domain", "prompt tokens per row (summed over turns)").name,
        "prompt lengths",
    )
    doc.image(plots.reasoning_vs_answer(run, dest / "reasoning_vs_answer.png", count, unit).name, "reasoning vs answer")

    doc.heading("Finish reasons")
    doc.image(plots.finish_by_domain(run, dest / "finish_reasons.png").name, "finish reasons by domain")
    fr = Counter(f for r in run.rows for f in r.finish)
    total = sum(fr.values()) or 1
    doc.table(["finish_reason", "turns", "share"], [[k, v, _pct(100 * v / total)] for k, v in fr.most_common()])

    _token_ids(doc, run, tokenizer)
    profiles_section(doc, run)
    tool_turns_section(doc, run)

    doc.heading("Errors")
    if run.errors:
        doc.image(plots.error_reasons(run, dest / "error_reasons.png").name, "error reasons")
        doc.table(["reason", "rows", "example"], [[k, v, run.error_examples[k]] for k, v in run.errors.most_common()])
    else:
        doc.text("No rows in errors.jsonl.")

    (dest / "report.md").write_text(doc.markdown(), encoding="utf-8")
    if html:
        (dest / "report.html").write_text(doc.html(), encoding="utf-8")
    return dest / "report.md"


def _overview(doc: Document, run: Run) -> None:
    doc.heading("Overview")
    rows = [["output directory", f"`{run.outdir}`"], ["results (id, sample)", len(run.rows)], ["distinct prompts", len({r.id for r in run.rows})],
            ["error rows", sum(run.errors.values())]]
    if run.stats:
        s = run.stats
        rows += [
            ["wall time (s)", s.get("wall_s")],
            ["output tokens / s", s.get("output_tokens_per_s")],
            ["completion tokens", (s.get("tokens") or {}).get("completion")],
            ["truncated rows", (s.get("rows") or {}).get("truncated")],
            ["stopped", s.get("stopped_reason") or "finished"],
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


def _token_ids(doc: Document, run: Run, tokenizer: str | None) -> None:
    """Turns with and without the server's token ids, and how often re-encoding their text would differ."""
    from fleetgen.export.fidelity import Mismatch, record_mismatch
    from fleetgen.export.results import iter_results

    doc.heading("Token ids")
    with_ids = sum(r.turns_with_ids for r in run.rows)
    without = sum(r.turns_without_ids for r in run.rows)
    rows: list[list[object]] = [
        ["regenerated turns with the server's token ids", with_ids],
        ["turns without (the tokens export re-tokenizes their rows)", without],
    ]
    why = Counter(w for r in run.rows for w in r.ids_missing)
    rows += [[f"  without: {reason}", n] for reason, n in sorted(why.items())]
    m = Mismatch()
    name = tokenizer or run.model
    if with_ids and name:
        try:
            from fleetgen.export.formats.tokens import load_tokenizer

            tok = load_tokenizer(name)
        except Exception:  # no local tokenizer: the counts above still stand
            tok = None
        if tok is not None:
            for rec in iter_results(run.outdir):
                m.add(record_mismatch(rec, tok))
                if m.turns >= FIDELITY_TURNS:
                    break
    if m.turns:
        rows.append([f"turns whose decoded text re-encodes to other ids (first {m.turns} turns with ids)",
                     f"{m.turns_differing} ({_pct(100 * m.turn_share)})"])
        rows.append(["sampled tokens a re-encoding would change", f"{m.tokens_affected} of {m.tokens} ({m.token_share:.2%})"])
    doc.text("Ids are what the server was fed and sampled (before reasoning and tool-call parsing); token exports use "
             "them as they are. A text round trip re-encodes to the canonical tokenization, which is not always the one sampled.")
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
        rows.append([
            d, len(ids), _pct(100 * len(ids) / n_prompts),
            _pct(100 * target.get(d, 0)) if target else "-",
            len(rs), int(np.median(out)), int(np.percentile(out, 95)), _pct(100 * stop),
        ])
    doc.table(["domain", "prompts", "share", "mix target", "rows", "median out tok", "p95 out tok", "finished (stop)"], rows)


def _replica_table(doc: Document, run: Run) -> None:
    reps = (run.stats or {}).get("replicas") or []
    if not reps:
        return
    doc.table(
        ["replica", "endpoint", "in-flight limit (range)", "requests", "ok", "failures", "completion tokens", "output tok/s",
         "ejections", "engine preemptions", "moved"],
        [[r.get("index"), r.get("endpoint"), _limit(r), r.get("requests"), r.get("ok"), r.get("failures"),
          r.get("completion_tokens"), r.get("output_tokens_per_s"), r.get("ejections"), r.get("engine_preemptions", "-"),
          r.get("moved", "-")]
         for r in reps],
    )
    for r in reps:
        gone = r.get("stopped_answering")
        if gone:
            doc.text(f"Replica {r.get('index')} ({r.get('endpoint')}) stopped answering {describe_silence(gone)}.")


def _limit(r: dict) -> str:
    """The window at the end of the run, with the range it moved in under --concurrency auto."""
    low, high = r.get("window_range") or (None, None)
    end = r.get("window")
    return f"{end} ({low}-{high})" if low is not None and (low, high) != (end, end) else str(end)
