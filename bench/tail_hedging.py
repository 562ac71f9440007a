"""The tail of a run (time from 99% to 100% of samples done), with and without hedging.

Two STAND-IN servers (tests/generate/standin_server.py, not engines): a fast one and a straggler
200x slower per token. Least-outstanding dispatch still sends the straggler its share, so without
hedging the last samples wait on it; with hedging they are re-sent to the idle fast replica.
Usage: .venv/bin/python bench/tail_hedging.py [--prompts 200] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "generate"))
from standin_server import StandinServer  # noqa: E402

from fleetgen.generate import GenerateConfig, generate  # noqa: E402


def one_run(prompts: Path, endpoints: list[str], hedge: bool, max_tokens: int) -> dict:
    marks: list[tuple[float, int, int]] = []
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as out:
        cfg = GenerateConfig(
            prompts=prompts,
            output_dir=Path(out),
            endpoints=endpoints,
            model="standin",
            max_tokens=max_tokens,
            concurrency=8,
            hedge=hedge,
            hedge_after_s=1.0,
            commit_interval_s=0.05,
        )
        stats = generate(
            cfg, on_progress=lambda s: marks.append((time.monotonic(), s.done, s.total)), handle_signals=False
        )
    end = time.monotonic()
    total = stats.total
    t99 = next(t for t, done, _ in marks if done >= 0.99 * total)
    return {
        "hedge": hedge,
        "wall_s": end - t0,
        "tail_s": end - t99,
        "hedges": sum(r.hedges for r in stats.replicas),
        "ok": stats.ok,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=1000)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/tail_hedging.json")
    args = ap.parse_args()
    fast, slow = StandinServer(delay_per_token_s=0.005), StandinServer(delay_per_token_s=1.0)
    endpoints = [fast.start(), slow.start()]
    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            prompts = Path(tmp) / "prompts.jsonl"
            with open(prompts, "w") as f:
                for i in range(args.prompts):
                    f.write(
                        json.dumps({"id": f"p{i}", "messages": [{"role": "user", "content": f"question {i}"}]}) + "\n"
                    )
            for _ in range(args.repeats):
                for hedge in (False, True):
                    rows.append(one_run(prompts, endpoints, hedge, args.max_tokens))
                    print(rows[-1], flush=True)
    finally:
        fast.stop()
        slow.stop()
    t = Table(
        title=f"tail with and without hedging ({args.prompts} prompts, fast vs 200x slower stand-in, medians of "
        f"{args.repeats})"
    )
    for col in ("hedging", "wall s", "99% -> 100% s", "hedged requests"):
        t.add_column(col)
    summary = {}
    for hedge in (False, True):
        arm = [r for r in rows if r["hedge"] is hedge]
        med = {k: statistics.median(r[k] for r in arm) for k in ("wall_s", "tail_s", "hedges")}
        summary["on" if hedge else "off"] = med
        t.add_row("on" if hedge else "off", f"{med['wall_s']:.1f}", f"{med['tail_s']:.2f}", f"{med['hedges']:.0f}")
    Console().print(t)
    ratio = summary["off"]["tail_s"] / max(summary["on"]["tail_s"], 1e-9)
    print(f"tail off / on = {ratio:.1f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"runs": rows, "medians": summary, "tail_ratio_off_on": ratio}, indent=2))


if __name__ == "__main__":
    main()
