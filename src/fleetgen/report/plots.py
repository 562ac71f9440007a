"""The report's PNG charts: a title, labelled axes and units, legends beside the plot, never over the data.

A chart with nothing to show is not drawn: each function returns a Chart whose `why` the report
prints in its place (a blank plot with a note on it said less, and the note sat over a bar).
"""

from __future__ import annotations

import textwrap
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from fleetgen.report.data import Run  # noqa: E402

if TYPE_CHECKING:
    from fleetgen.report.document import Document
    from fleetgen.report.runs import Span

FINISH_COLORS = {"stop": "tab:green", "tool_calls": "tab:blue", "length": "tab:red"}


@dataclass(frozen=True)
class Chart:
    """A written chart (`path`), or why there is none (`why`)."""

    path: Path | None = None
    why: str = ""


def place(doc: Document, chart: Chart, alt: str) -> None:
    """The chart into the document, or the line saying why it was left out."""
    if chart.path is not None:
        doc.image(chart.path.name, alt)
    else:
        doc.text(f"*No {alt} chart: {chart.why}.*")


def save(fig: plt.Figure, path: Path) -> Chart:
    """Write the figure (room for the legend beside the axes included) and close it."""
    fig.savefig(path, dpi=110, bbox_inches="tight")  # the room the legend beside the axes needs
    plt.close(fig)
    return Chart(path)


def _legend_beside(ax: plt.Axes, **kw) -> None:
    """The legend right of the axes, outside them: it covers no data whatever the data's shape."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, fontsize=8, **kw)


def throughput(run: Run, path: Path, spans: list[Span] | None = None) -> Chart:
    """Output tokens per second over the run, stacked per replica (the top edge is the fleet's total).

    Each row's tokens are spread evenly over the time it was in flight (start to completion), so the
    curve is a rate, not a spike at each completion. Several runs are placed end to end: the hours
    between an interrupted run and its resume are left out, and a dashed line marks each later start.
    """
    timed = [r for r in run.rows if r.ended_at is not None and r.started_at is not None and r.replicas]
    if not timed:
        return Chart(why="no result row records its start and latency")
    shift, starts = _placement(spans or [])
    a = np.array([r.started_at + shift(r) for r in timed])  # type: ignore[operator]
    b = np.maximum(np.array([r.ended_at + shift(r) for r in timed]), a + 1e-3)  # type: ignore[operator]
    t0, t1 = float(a.min()), float(b.max())
    width = max(1.0, (t1 - t0) / 60)
    n = int((t1 - t0) // width) + 1
    edges = np.arange(n + 1) * width
    per: dict[str, np.ndarray] = defaultdict(lambda: np.zeros(n))
    for r, start, end in zip(timed, a - t0, b - t0):
        overlap = np.clip(np.minimum(edges[1:], end) - np.maximum(edges[:-1], start), 0, None)
        share = overlap / (end - start) * r.completion_tokens
        for rep in r.replicas:  # a conversation served by several replicas: split its tokens
            per[rep] += share / len(r.replicas)
    fig, ax = plt.subplots(figsize=(9, 4))
    reps = sorted(per)
    ys = [np.append(per[rep], per[rep][-1]) / width for rep in reps]
    ax.stackplot(edges, ys, step="post", labels=[f"replica {i}: {rep}" for i, rep in enumerate(reps)], alpha=0.85)
    for x in starts:
        ax.axvline(x - t0, color="black", linestyle="--", linewidth=1)
    runs = f", {len(starts) + 1} runs end to end" if starts else ""
    ax.set_title("Output throughput per replica (stacked: the top edge is the fleet)")
    ax.set_xlabel(f"generate time since the first request (s){runs}, {width:.0f} s bins")
    ax.set_ylabel("output tokens / s")
    ax.set_xlim(0, edges[-1])
    ax.set_ylim(bottom=0)
    _legend_beside(ax)
    ax.grid(alpha=0.3)
    return save(fig, path)


def _placement(spans: list[Span]):
    """(row -> seconds to add to its times, where each later run starts): the runs end to end, gaps taken out."""
    if len(spans) < 2:
        return (lambda r: 0.0), []
    shift_of: dict[int, float] = {}
    starts: list[float] = []
    base: float | None = None
    for s in spans:
        times = [(r.started_at, r.ended_at) for r in s.rows if r.started_at is not None and r.ended_at is not None]
        if not times:
            continue
        first, last = min(t[0] for t in times), max(t[1] for t in times)
        if base is None:
            base = first  # the first run stays where it was
        else:
            starts.append(base)
        for r in s.rows:
            shift_of[id(r)] = base - first
        base += last - first
    return (lambda r: shift_of.get(id(r), 0.0)), starts


def length_hist(run: Run, path: Path, attr: str, title: str, xlabel: str) -> Chart:
    """A histogram of one token count, stacked by domain."""
    by: dict[str, list[int]] = defaultdict(list)
    for r in run.rows:
        by[r.domain].append(getattr(r, attr))
    values = [v for vs in by.values() for v in vs]
    if not values:
        return Chart(why="no result rows")
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.set_title(title)
    bins = np.histogram_bin_edges(values, bins=min(30, max(5, len(set(values)))))
    domains = sorted(by)
    ax.hist([by[d] for d in domains], bins=bins, stacked=True, label=domains)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("rows (id, sample)")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    _legend_beside(ax, title="domain")
    ax.grid(alpha=0.3)
    return save(fig, path)


def finish_by_domain(run: Run, path: Path) -> Chart:
    """Finish reasons of every regenerated turn, stacked per domain."""
    counts: dict[str, Counter] = defaultdict(Counter)
    for r in run.rows:
        counts[r.domain].update(r.finish)
    if not counts:
        return Chart(why="no result rows")
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.set_title("Finish reasons by domain (every regenerated turn)")
    domains = sorted(counts)
    reasons = sorted({k for c in counts.values() for k in c})
    bottom = np.zeros(len(domains))
    for reason in reasons:
        vals = np.array([counts[d][reason] for d in domains], dtype=float)
        ax.bar(domains, vals, bottom=bottom, label=reason, color=FINISH_COLORS.get(reason))
        bottom += vals
    ax.set_xlabel("domain")
    ax.set_ylabel("assistant turns")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    _legend_beside(ax, title="finish_reason")
    ax.grid(alpha=0.3, axis="y")
    return save(fig, path)


def reasoning_vs_answer(run: Run, path: Path, unit: str) -> Chart:
    """Mean reasoning and answer length per row, by domain, side by side; `unit` tokens (from ids) or characters."""
    if not any(r.has_reasoning for r in run.rows):
        return Chart(why="no row has reasoning_content")
    tokens = unit == "tokens"
    by: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for r in run.rows:
        pair = (r.reasoning_tokens or 0, r.answer_tokens or 0) if tokens else (r.reasoning_chars, r.answer_chars)
        by[r.domain].append(pair)
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.set_title(f"Reasoning vs answer length per row, by domain ({unit})")
    domains = sorted(by)
    x = np.arange(len(domains))
    ax.bar(x - 0.2, [np.mean([a for a, _ in by[d]]) for d in domains], 0.4, label="reasoning_content")
    ax.bar(x + 0.2, [np.mean([b for _, b in by[d]]) for d in domains], 0.4, label="answer (content)")
    ax.set_xticks(x, domains)
    ax.set_xlabel("domain")
    ax.set_ylabel(f"mean {unit} per row")
    _legend_beside(ax)
    ax.grid(alpha=0.3, axis="y")
    return save(fig, path)


def error_reasons(run: Run, path: Path) -> Chart:
    """Error rows per reason, most frequent first."""
    top = run.errors.most_common(12)
    if not top:
        return Chart(why="no error rows")
    fig, ax = plt.subplots(figsize=(10, max(2.5, 0.6 * len(top) + 1.2)))
    ax.set_title("Error reasons (errors.jsonl)")
    labels = [textwrap.fill(k, 40) for k, _ in top][::-1]
    ax.barh(labels, [v for _, v in top][::-1], color="tab:red")
    ax.set_xlabel("rows (id, sample)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.tick_params(axis="y", labelsize=7)
    ax.grid(alpha=0.3, axis="x")
    return save(fig, path)


def mix_shares(run: Run, path: Path, target: dict[str, float] | None) -> Chart:
    """Share of prompts per domain in this run, beside the mix recipe's target share when known."""
    prompts: dict[str, str] = {}
    for r in run.rows:
        prompts.setdefault(r.id, r.domain)
    if not prompts:
        return Chart(why="no result rows")
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.set_title("Mix shares by domain (prompts)")
    c = Counter(prompts.values())
    domains = sorted(set(c) | set(target or {}))
    got = [100 * c[d] / len(prompts) for d in domains]
    x = np.arange(len(domains))
    if target:
        ax.bar(x - 0.2, got, 0.4, label="in results")
        ax.bar(x + 0.2, [100 * (target.get(d) or 0) for d in domains], 0.4, label="mix target")
    else:
        ax.bar(x, got, 0.6, label="in results")
    ax.set_xticks(x, domains)
    ax.set_xlabel("domain (meta.domain)")
    ax.set_ylabel("share of prompts (%)")
    _legend_beside(ax)
    ax.grid(alpha=0.3, axis="y")
    return save(fig, path)
