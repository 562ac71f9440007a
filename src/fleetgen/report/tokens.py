"""The report's token sections: reasoning vs answer length, and turns with the server's ids vs a text round trip."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from fleetgen.models.tokenizer import LocalTokenizer, TokenizerSource
from fleetgen.report import plots
from fleetgen.report.data import Run
from fleetgen.report.document import Document, pct

FIDELITY_TURNS = 5000  # turns a report re-encodes to show the run's own text round-trip mismatch


def reasoning_section(doc: Document, run: Run, dest: Path, source: TokenizerSource, tok: LocalTokenizer | None) -> None:
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
    plots.place(doc, plots.reasoning_vs_answer(run, dest / "reasoning_vs_answer.png", unit), "reasoning vs answer")


def token_ids_section(doc: Document, run: Run, source: TokenizerSource, tok: LocalTokenizer | None) -> None:
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
                f"{m.turns_differing} ({pct(100 * m.turn_share)})",
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
