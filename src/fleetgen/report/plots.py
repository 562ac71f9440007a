"""The report's PNG charts; each one has a title, labelled axes and units, and says so when it has no data."""

from __future__ import annotations

import textwrap
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from fleetgen.report.data import Run  # noqa: E402

Counter_ = Callable[[str], int]
FINISH_COLORS = {"stop": "tab:green", "tool_calls": "tab:blue", "length": "tab:red"}


def _save(fig: plt.Figure, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _empty(ax: plt.Axes, what: str) -> None:
    ax.text(0.5, 0.5, f"no {what} in this run", ha="center", va="center", transform=ax.transAxes, color="grey")
    ax.set_xticks([])
    ax.set_yticks([])


def throughput(run: Run, path: Path) -> Path:
    """Output tokens per second over the run, stacked per replica (the top edge is the fleet's total).

    Each row's tokens are spread evenly over the time it was in flight (start to completion), so
    the curve is a rate, not a spike at each completion.
    """
    fig, ax = plt.subplots(figsize=(9, 4))
    timed = [r for r in run.rows if r.ended_at is not None and r.started_at is not None and r.replicas]
    if not timed:
        ax.set_title("Output throughput per replica")
        _empty(ax, "timed results")
        return _save(fig, path)
    t0 = min(r.started_at for r in timed)  # type: ignore[type-var]
    t1 = max(r.ended_at for r in timed)  # type: ignore[type-var]
    width = max(1.0, (t1 - t0) / 60)
    n = int((t1 - t0) // width) + 1
    edges = np.arange(n + 1) * width
    per: dict[str, np.ndarray] = defaultdict(lambda: np.zeros(n))
    for r in timed:
        a, b = r.started_at - t0, max(r.ended_at - t0, r.started_at - t0 + 1e-3)  # type: ignore[operator]
        overlap = np.clip(np.minimum(edges[1:], b) - np.maximum(edges[:-1], a), 0, None)
        share = overlap / (b - a) * r.completion_tokens
        for rep in r.replicas:  # a conversation served by several replicas: split its tokens
            per[rep] += share / len(r.replicas)
    reps = sorted(per)
    ys = [np.append(per[rep], per[rep][-1]) / width for rep in reps]
    ax.stackplot(edges, ys, step="post", labels=[f"replica {i}: {rep}" for i, rep in enumerate(reps)], alpha=0.85)
    ax.set_title("Output throughput per replica (stacked: the top edge is the fleet)")
    ax.set_xlabel(f"time since the run's first request (s), {width:.0f} s bins")
    ax.set_ylabel("output tokens / s")
    ax.set_xlim(0, edges[-1])
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8, loc="upper right")
    ax.grid(alpha=0.3)
    return _save(fig, path)


def length_hist(run: Run, path: Path, attr: str, title: str, xlabel: str) -> Path:
    """A histogram of one token count, stacked by domain."""
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.set_title(title)
    by: dict[str, list[int]] = defaultdict(list)
    for r in run.rows:
        by[r.domain].append(getattr(r, attr))
    values = [v for vs in by.values() for v in vs]
    if not values:
        _empty(ax, "results")
        return _save(fig, path)
    bins = np.histogram_bin_edges(values, bins=min(30, max(5, len(set(values)))))
    domains = sorted(by)
    ax.hist([by[d] for d in domains], bins=bins, stacked=True, label=domains)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("rows (id, sample)")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(title="domain", fontsize=8)
    ax.grid(alpha=0.3)
    return _save(fig, path)


def finish_by_domain(run: Run, path: Path) -> Path:
    """Finish reasons of every regenerated turn, stacked per domain."""
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.set_title("Finish reasons by domain (every regenerated turn)")
    counts: dict[str, Counter] = defaultdict(Counter)
    for r in run.rows:
        counts[r.domain].update(r.finish)
    if not counts:
        _empty(ax, "results")
        return _save(fig, path)
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
    ax.legend(title="finish_reason", fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    return _save(fig, path)


def reasoning_vs_answer(run: Run, path: Path, count: Counter_, unit: str) -> Path:
    """Mean reasoning and answer length per domain, side by side."""
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.set_title(f"Reasoning vs answer length per row, by domain ({unit})")
    by: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for r in run.rows:
        by[r.domain].append((count(r.reasoning_text), count(r.answer_text)))
    if not by:
        _empty(ax, "results")
        return _save(fig, path)
    domains = sorted(by)
    reasoning = [np.mean([a for a, _ in by[d]]) for d in domains]
    answer = [np.mean([b for _, b in by[d]]) for d in domains]
    x = np.arange(len(domains))
    ax.bar(x - 0.2, reasoning, 0.4, label="reasoning_content")
    ax.bar(x + 0.2, answer, 0.4, label="answer (content)")
    ax.set_xticks(x, domains)
    ax.set_xlabel("domain")
    ax.set_ylabel(f"mean {unit} per row")
    if not any(reasoning):
        ax.text(0.5, 0.92, "no reasoning captured in this run", ha="center", transform=ax.transAxes, color="grey")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    return _save(fig, path)


def error_reasons(run: Run, path: Path) -> Path:
    """Error rows per reason, most frequent first."""
    top = run.errors.most_common(12)
    fig, ax = plt.subplots(figsize=(10, max(2.5, 0.6 * len(top) + 1.2)))
    ax.set_title("Error reasons (errors.jsonl)")
    if not top:
        _empty(ax, "errors")
        return _save(fig, path)
    labels = [textwrap.fill(k, 40) for k, _ in top][::-1]
    ax.barh(labels, [v for _, v in top][::-1], color="tab:red")
    ax.set_xlabel("rows (id, sample)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.tick_params(axis="y", labelsize=7)
    ax.grid(alpha=0.3, axis="x")
    return _save(fig, path)


def mix_shares(run: Run, path: Path, target: dict[str, float] | None) -> Path:
    """Share of prompts per domain in this run, beside the mix recipe's target share when known."""
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.set_title("Mix shares by domain (prompts)")
    prompts: dict[str, str] = {}
    for r in run.rows:
        prompts.setdefault(r.id, r.domain)
    if not prompts:
        _empty(ax, "results")
        return _save(fig, path)
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
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    return _save(fig, path)
