"""`fleetgen generate --endpoint` (the real CLI) vs a plain saturating aiohttp client on the same servers.

Same prompts, same requests in flight, arms in the order given (default A B B A, so drift shows as a
difference between the two runs of an arm). Each arm is its own process; its CPU time is read from
the OS (children's rusage), so both clients are charged the same way; `import_cpu_s` (an interpreter
that only imports that client) is subtracted in `cpu_ms_per_request_less_imports`.

Usage: python bench/client_vs_plain.py --endpoint http://127.0.0.1:30000 --model model \
           --prompts 2000 --max-tokens 128 --concurrency 256 --arms ABBA --out result.json
A = fleetgen generate, B = plain client, C = fleetgen generate --no-token-ids (on SGLang 0.5.12: the chat
path, vs A's native /generate path). `--endpoint` repeats: the plain client then keeps `--concurrency`
requests in flight on each endpoint, as fleetgen does per replica. `--plain` runs one plain arm in this
process (used by B).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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


def prompt_rows(n: int) -> list[dict]:
    return [
        {
            "id": f"p{i}",
            "messages": [{"role": "user", "content": f"Write a short paragraph about {TOPICS[i % 10]}. ({i})"}],
        }
        for i in range(n)
    ]


async def plain(endpoints: list[str], model: str, rows: list[dict], window: int, max_tokens: int) -> dict:
    """The engines' ceiling: `window` workers per endpoint pull the next prompt as soon as one finishes; no journal."""
    import aiohttp

    queue: asyncio.Queue = asyncio.Queue()
    for r in rows:
        queue.put_nowait(r)
    tokens = ok = 0
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:

        async def worker(endpoint: str) -> None:
            nonlocal tokens, ok
            while not queue.empty():
                row = queue.get_nowait()
                body = {
                    "model": model,
                    "messages": row["messages"],
                    "max_tokens": max_tokens,
                    "temperature": 0,
                    "top_p": 1.0,
                }
                async with http.post(endpoint + "/v1/chat/completions", json=body) as resp:
                    payload = await resp.json()
                if resp.status == 200:
                    tokens += payload["usage"]["completion_tokens"]
                    ok += 1

        t0 = time.monotonic()
        await asyncio.gather(*(worker(e) for e in endpoints for _ in range(window)))
        wall = time.monotonic() - t0
    return {"ok": ok, "completion_tokens": tokens, "run_wall_s": round(wall, 3)}


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_arm(argv: list[str], env: dict[str, str], timeout_s: float) -> tuple[float, float, subprocess.CompletedProcess]:
    cpu0, t0 = children_cpu(), time.monotonic()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout_s)
    return time.monotonic() - t0, children_cpu() - cpu0, proc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--endpoint", action="append", required=True, help="repeatable")
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompts", type=int, default=2000)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--concurrency", type=int, default=256, help="requests in flight (both clients)")
    ap.add_argument("--arms", default="ABBA")
    ap.add_argument("--timeout", type=float, default=300, help="seconds one arm may take")
    ap.add_argument("--fleetgen", default="fleetgen", help="the fleetgen command (argv[0])")
    ap.add_argument(
        "--fleetgen-arg", action="append", default=[], help="extra argument of the fleetgen arms (repeatable)"
    )
    ap.add_argument("--out", default=None)
    ap.add_argument("--plain", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--prompt-file", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.plain:
        rows = [json.loads(line) for line in Path(args.prompt_file).read_text().splitlines()]
        print(json.dumps(asyncio.run(plain(args.endpoint, args.model, rows, args.concurrency, args.max_tokens))))
        return

    tmp = Path(tempfile.mkdtemp(prefix="client-vs-plain-"))
    prompts = tmp / "prompts.jsonl"
    prompts.write_text("".join(json.dumps(r) + "\n" for r in prompt_rows(args.prompts)))
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    ep_args = [a for e in args.endpoint for a in ("--endpoint", e)]
    # What an interpreter spends importing each client, charged to neither per-request figure.
    import_cpu = {
        "A": run_arm([sys.executable, "-c", "import fleetgen.cli.app, fleetgen.generate"], env, 120)[1],
        "B": run_arm([sys.executable, "-c", "import aiohttp, asyncio, json"], env, 120)[1],
    }
    import_cpu["C"] = import_cpu["A"]
    arms = []
    # Warm-up: first requests pay CUDA-graph and allocator costs neither arm should carry.
    run_arm(
        [
            sys.executable,
            __file__,
            "--plain",
            *ep_args,
            "--model",
            args.model,
            "--prompt-file",
            str(prompts),
            "--concurrency",
            "32",
            "--max-tokens",
            "8",
        ],
        env,
        args.timeout,
    )
    for k, arm in enumerate(args.arms):
        if arm in "AC":
            out = tmp / f"gen-{k}"
            argv = [
                args.fleetgen,
                "generate",
                str(prompts),
                "-o",
                str(out),
                *ep_args,
                "--model",
                args.model,
                "--max-tokens",
                str(args.max_tokens),
                "--temperature",
                "0",
                "--concurrency",
                str(args.concurrency),
                "--no-prefix-affinity",
                *args.fleetgen_arg,
                *(["--no-token-ids"] if arm == "C" else []),
            ]
            wall, cpu, proc = run_arm(argv, env, args.timeout)
            if proc.returncode != 0:
                sys.exit(f"fleetgen arm failed ({proc.returncode}): {proc.stderr[-2000:]}")
            stats = json.loads((out / "stats.json").read_text())
            res = {
                "arm": "A fleetgen generate" if arm == "A" else "C fleetgen generate --no-token-ids",
                "ok": stats["rows"]["ok"],
                "errors": stats["rows"]["errors"],
                "completion_tokens": stats["tokens"]["completion"],
                "run_wall_s": stats["wall_s"],
            }
        else:
            argv = [
                sys.executable,
                __file__,
                "--plain",
                *ep_args,
                "--model",
                args.model,
                "--prompt-file",
                str(prompts),
                "--concurrency",
                str(args.concurrency),
                "--max-tokens",
                str(args.max_tokens),
            ]
            wall, cpu, proc = run_arm(argv, env, args.timeout)
            if proc.returncode != 0:
                sys.exit(f"plain arm failed ({proc.returncode}): {proc.stderr[-2000:]}")
            res = {"arm": "B plain aiohttp", **json.loads(proc.stdout.strip().splitlines()[-1])}
        res.update(
            process_wall_s=round(wall, 3),
            process_cpu_s=round(cpu, 3),
            output_tok_s=round(res["completion_tokens"] / res["run_wall_s"], 1),
            cpu_ms_per_request=round(1000 * cpu / max(res["ok"], 1), 3),
            cpu_ms_per_request_less_imports=round(1000 * (cpu - import_cpu[arm]) / max(res["ok"], 1), 3),
        )
        print(json.dumps(res), flush=True)
        arms.append(res)

    def mean(name: str, key: str) -> float:
        vals = [a[key] for a in arms if a["arm"].startswith(name)]
        return sum(vals) / len(vals) if vals else float("nan")

    result = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "settings": {
            "endpoint": args.endpoint,
            "model": args.model,
            "prompts": args.prompts,
            "max_tokens": args.max_tokens,
            "concurrency": args.concurrency,
            "arms": args.arms,
        },
        "import_cpu_s": {k: round(v, 3) for k, v in import_cpu.items()},
        "arms": arms,
        "ratio_output_tok_s_fleetgen_to_plain": round(mean("A", "output_tok_s") / mean("B", "output_tok_s"), 3),
        "ratio_output_tok_s_A_to_C": round(mean("A", "output_tok_s") / mean("C", "output_tok_s"), 3),
    }
    print(
        json.dumps(
            {
                k: result[k]
                for k in ("import_cpu_s", "ratio_output_tok_s_fleetgen_to_plain", "ratio_output_tok_s_A_to_C")
            }
        )
    )
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
