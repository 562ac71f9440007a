"""The outside reference: a plain saturating chat client, C requests in flight per endpoint, no journal.

What a 40-line script gets out of the same servers; fleetgen's arms are raced against it
(BENCHMARKS.md, "full speed"). It prints one JSON line: tokens, rows, the wall of its request loop
and of its whole process (interpreter start and imports included, as a fleetgen arm's is).

    python bench/plain_client.py --endpoint http://127.0.0.1:30000 --model model --prompts p.jsonl \
        --samples 4 --concurrency 256 --max-tokens 128 --temperature 0.8 --top-p 0.9
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

START = time.monotonic()

import aiohttp  # noqa: E402  (after START: the import is part of the process's wall)


async def run(args: argparse.Namespace) -> dict:
    rows = [json.loads(line) for line in open(args.prompts) if line.strip()]
    queue: asyncio.Queue = asyncio.Queue()
    for row in rows:
        for _ in range(args.samples):
            queue.put_nowait(row)
    tokens = ok = err = 0
    extra = {"chat_template_kwargs": {"enable_thinking": False}} if args.reasoning_off else {}
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=args.timeout)
    ) as http:

        async def worker(endpoint: str) -> None:
            nonlocal tokens, ok, err
            while not queue.empty() and time.monotonic() < deadline:
                row = queue.get_nowait()
                body = {
                    "model": args.model,
                    "messages": row["messages"],
                    "max_tokens": args.max_tokens,
                    "temperature": args.temperature,
                    "top_p": args.top_p,
                    **extra,
                }
                try:
                    async with http.post(endpoint + "/v1/chat/completions", json=body) as r:
                        payload = await r.json()
                    tokens += payload["usage"]["completion_tokens"]
                    ok += 1
                except Exception:  # noqa: BLE001  (counted, as a plain script would)
                    err += 1

        t0 = time.monotonic()
        deadline = t0 + args.deadline if args.deadline else float("inf")
        await asyncio.gather(*(worker(e) for e in args.endpoint for _ in range(args.concurrency)))
        loop_s = time.monotonic() - t0
    return {
        "arm": f"plain c={args.concurrency}",
        "ok": ok,
        "errors": err,
        "tokens": tokens,
        "loop_s": round(loop_s, 2),
        "loop_tok_s": round(tokens / loop_s, 1),
        "stopped_early": not queue.empty(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--endpoint", action="append", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompts", required=True, help="JSONL prompt records (id, messages)")
    ap.add_argument("--samples", type=int, default=1)
    ap.add_argument("--concurrency", type=int, default=256, help="requests in flight per endpoint")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--top-p", type=float, default=0.9)
    ap.add_argument(
        "--reasoning-off", action="store_true", help="send enable_thinking false, as fleetgen --reasoning off"
    )
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument(
        "--deadline",
        type=float,
        default=0,
        help="send no new request after this many seconds (0: none); the line then says stopped_early",
    )
    args = ap.parse_args()
    print(json.dumps(asyncio.run(run(args))), flush=True)


if __name__ == "__main__":
    main()
