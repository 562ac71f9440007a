"""Print the fault table of RELIABILITY.md from the JSON rows tests/faults/ writes.

    pytest tests/faults && python bench/reliability_table.py            # the fault table
    python bench/reliability_table.py --corpus                            # bad rows and configs, with texts
Rows are read from $FLEETGEN_FAULTS_RESULTS (default out/faults/).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ORDER = [
    "client_kill9",
    "client_sigterm",
    "client_sigint",
    "client_sigint_sigint",
    "replica_kill9_one",
    "replica_kill9_all",
    "server_hang",
    "server_500",
    "server_429",
    "server_garbage",
    "server_truncated",
    "disk_full",
    "outdir",
    "power_loss",
    "bad_rows",
]


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def fault_table(rows: list[dict]) -> str:
    def rank(r: dict) -> tuple[int, str]:
        return next((i for i, p in enumerate(ORDER) if r["key"].startswith(p)), len(ORDER)), r["key"]

    out = [
        "| fault | how injected | runs | rows | lost | duplicated | corrupt lines | outcome |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in sorted(rows, key=rank):
        out.append(
            "| "
            + " | ".join(
                _cell(r[k]) for k in ("fault", "injected", "runs", "rows", "lost", "duplicated", "corrupt", "outcome")
            )
            + " |"
        )
    total = {k: sum(r[k] for r in rows) for k in ("lost", "duplicated", "corrupt")}
    out.append(
        f"\n{len(rows)} faults; lost {total['lost']}, duplicated {total['duplicated']}, corrupt {total['corrupt']}."
    )
    return "\n".join(out)


def corpus_tables(d: Path) -> str:
    out = []
    rows_path, cfg_path = d / "corpus_rows.json", d / "corpus_configs.json"
    if rows_path.exists():
        out += [
            "| bad row | line | outcome | text it gets (errors.jsonl `reason`, cut at 160 chars) |",
            "|---|---:|---|---|",
        ]
        for r in json.loads(rows_path.read_text()):
            kind = "error" if r["expected"] == "error" else "accepted"
            out.append(f"| {_cell(r['row'])} | {r['line']} | {kind} | {_cell(r['text'][:160])} |")
    if cfg_path.exists():
        out += ["", "| bad config / flag | exit | text it gets (first 220 chars) |", "|---|---:|---|"]
        for r in json.loads(cfg_path.read_text()):
            text = " / ".join(
                x.strip() for x in r["text"].splitlines() if x.strip() and not set(x.strip()) <= set("╭─╮╰╯│ ")
            )
            out.append(f"| {_cell(r['case'])} | {r['exit']} | {_cell(text[:220])} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--results", type=Path, default=Path(os.environ.get("FLEETGEN_FAULTS_RESULTS", REPO / "out" / "faults"))
    )
    ap.add_argument("--corpus", action="store_true", help="print the bad-row and bad-config corpora instead")
    args = ap.parse_args()
    if args.corpus:
        print(corpus_tables(args.results))
        return
    rows = [json.loads(p.read_text()) for p in sorted(args.results.glob("*.json")) if not p.name.startswith("corpus_")]
    if not rows:
        raise SystemExit(f"no results in {args.results}: run `pytest tests/faults` first")
    print(fault_table(rows))


if __name__ == "__main__":
    main()
