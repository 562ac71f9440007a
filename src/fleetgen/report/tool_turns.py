"""The report's tool-turn section: samples cut where the target diverged from a recorded tool call."""

from __future__ import annotations

from collections import Counter

from fleetgen.report.data import Run
from fleetgen.report.document import Document

MEANING = {
    "answered_without_call": "the record called a tool; the target answered instead",
    "other_function": "the target called a function the record did not call there",
    "other_arguments": "the target called the recorded function with other arguments",
    "no_recorded_result": "the target made a recorded call that has no recorded result",
    "unrecorded_call": "the target called a tool where the record answered, and the record went on",
}


def tool_turns_section(doc: Document, run: Run) -> None:
    """A section only when the run holds tool results or cut samples."""
    counts = (run.stats or {}).get("tool_turns") or {}
    cuts = Counter(r.cut for r in run.rows if r.cut)
    if not cuts and not counts.get("results_kept") and not counts.get("results_dropped"):
        return
    doc.heading("Tool turns")
    doc.text(
        "A recorded tool result is kept only after a regenerated call it answers; where the target diverged, "
        "the sample ends at the target's own turn (kept and supervised) and the row's `cut` says why."
    )
    rows = [
        [reason, n, f"{100 * n / max(1, len(run.rows)):.1f}%", MEANING.get(reason, "")]
        for reason, n in cuts.most_common()
    ]
    doc.table(["cut reason", "rows", "share of rows", "meaning"], rows or [["(none)", 0, "0.0%", "no sample was cut"]])
    if counts:
        doc.text(
            f"Recorded tool results kept: {counts.get('results_kept', 0)}; dropped because their call was not made: "
            f"{counts.get('results_dropped', 0)} (outside cut samples)."
        )
