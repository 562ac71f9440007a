"""The mix report: summary.json, report.md (tables) and PNG charts of shares, lengths and duplicates."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np

from fleetgen.mix.licenses import commercial_use
from fleetgen.mix.summary import MixSummary


def _shares(counter: Counter, keys: list[str]) -> list[float]:
    total = sum(counter.values()) or 1
    return [counter.get(k, 0) / total for k in keys]


def _bars(path: Path, title: str, labels: list[str], series: dict[str, list[float]], ylabel: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(labels) + 2), 4))
    width = 0.8 / max(len(series), 1)
    x = np.arange(len(labels))
    for i, (name, values) in enumerate(series.items()):
        ax.bar(x + (i - (len(series) - 1) / 2) * width, values, width, label=name)
    ax.set_xticks(x, labels, rotation=30, ha="right")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if len(series) > 1:
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _histogram(path: Path, before: np.ndarray, after: np.ndarray) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    top = max(int(before.max()) if len(before) else 1, int(after.max()) if len(after) else 1, 2)
    bins = np.unique(np.geomspace(1, top + 1, 40).astype(int))
    for data, name in ((before, "before (all normalized prompts)"), (after, "after (written)")):
        if len(data):
            ax.hist(np.maximum(data, 1), bins=bins, alpha=0.55, label=name, density=True)
    ax.set_xscale("log")
    ax.set_xlabel("prompt tokens")
    ax.set_ylabel("density")
    ax.set_title("Prompt length")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _table(header: list[str], rows: list[list[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def write_report(summary: MixSummary, out: Path, lengths_before: np.ndarray, lengths_after: np.ndarray) -> list[Path]:
    """Write the report files into `out`; returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    srcs = summary.sources
    before = sum((s.domains_before for s in srcs), Counter())
    after = sum((s.domains_after for s in srcs), Counter())
    domains = [a.domain for a in summary.domains] + sorted(set(before) - {a.domain for a in summary.domains})
    names = [s.name for s in srcs]
    src_before = Counter({s.name: s.normalized for s in srcs})
    src_after = Counter({s.name: s.selected for s in srcs})

    files = [out / "domain_shares.png", out / "source_shares.png", out / "prompt_lengths.png", out / "duplicates.png"]
    target = {a.domain: a.share for a in summary.domains}
    _bars(
        files[0],
        "Domain shares",
        domains,
        {
            "before": _shares(before, domains),
            "quota": [target.get(d, 0.0) for d in domains],
            "after": _shares(after, domains),
        },
        "share",
    )
    _bars(
        files[1],
        "Source shares",
        names,
        {"before": _shares(src_before, names), "after": _shares(src_after, names)},
        "share",
    )
    _histogram(files[2], lengths_before, lengths_after)
    _bars(
        files[3],
        "Duplicates removed per source",
        names,
        {
            "exact": [s.exact_duplicates for s in srcs],
            "near": [s.near_duplicates for s in srcs],
        },
        "rows",
    )

    unit = summary.quota_unit
    domain_rows = []
    for a in summary.domains:
        domain_rows.append(
            [
                a.domain,
                f"{a.share:.3f}",
                f"{a.target:g}",
                f"{a.available:g}",
                f"{a.allocated:g}",
                after.get(a.domain, 0),
                f"{_shares(before, [a.domain])[0]:.3f}",
                f"{_shares(after, [a.domain])[0]:.3f}",
                a.note or "",
            ]
        )
    source_rows = [
        [
            s.name,
            s.adapter,
            s.rows_read,
            sum(s.skipped.values()),
            sum(s.filtered.values()),
            s.capped,
            s.exact_duplicates,
            s.near_duplicates,
            s.candidates,
            s.selected,
            f"{_shares(src_before, [s.name])[0]:.3f}",
            f"{_shares(src_after, [s.name])[0]:.3f}",
        ]
        for s in srcs
    ]
    lic_rows = []
    for s in srcs:
        for lic, n in sorted(s.licenses.items()):
            lic_rows.append([s.name, lic, n, s.licenses_selected.get(lic, 0), commercial_use(lic)])
    skip_lines = []
    for s in srcs:
        for reason, n in s.skipped.most_common():
            skip_lines.append(f"- {s.name}: {n} x {reason}")
        skip_lines += [f"  - e.g. {e}" for e in s.skipped_examples]
        for reason, n in s.filtered.most_common():
            skip_lines.append(f"- {s.name}: {n} filtered ({reason})")

    md = [
        "# Mix report",
        "",
        f"Output: `{summary.output}`, {summary.rows_written} prompts, {summary.tokens_written} prompt tokens "
        f"(quota unit: {unit}, requested {summary.total_requested}, seed {summary.seed}).",
        f"Duplicates removed across sources: {summary.cross_source_duplicates}.",
        "",
        "## Domains",
        "",
        _table(
            [
                "domain",
                "quota",
                f"target ({unit})",
                f"available ({unit})",
                f"allocated ({unit})",
                "written rows",
                "share before",
                "share after",
                "note",
            ],
            domain_rows,
        ),
        "",
        "## Sources",
        "",
        _table(
            [
                "source",
                "adapter",
                "read",
                "skipped",
                "filtered",
                "capped",
                "exact dups",
                "near dups",
                "candidates",
                "written",
                "share before",
                "share after",
            ],
            source_rows,
        ),
        "",
        "## Licenses",
        "",
        _table(["source", "license", "prompts read", "prompts written", "commercial use"], lic_rows),
        "",
        "## Skipped and filtered rows",
        "",
        *(skip_lines or ["none"]),
        "",
        "## Notes",
        "",
        *([f"- {n}" for n in summary.notes] or ["none"]),
        "",
        *[f"![{p.stem}]({p.name})" for p in files],
        "",
    ]
    (out / "report.md").write_text("\n".join(md), encoding="utf-8")
    (out / "summary.json").write_text(json.dumps(summary.to_dict(), indent=2, default=str), encoding="utf-8")
    return [out / "report.md", out / "summary.json", *files]
