"""CPU per request of `generate` with metrics off, the port open, and the port open and scraped: an in-process A/B.

The NULL SERVER (bench/null_server.py, not an engine) runs on one core, each arm in a fresh child on the
other, arms alternating; CPU time of the whole child (every thread) over the requests it completed.

Usage: .venv/bin/python bench/metrics_ab.py [--rows 10000] [--repeats 5] [--scrape-every 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
MODES = ("off", "port", "scraped")


def child(mode: str, endpoints: list[str], rows: int, scrape_every_s: float) -> None:
    from fleetgen.generate import GenerateConfig, generate
    from fleetgen.generate import run as generate_run
    from fleetgen.metrics import MetricsServer

    with tempfile.TemporaryDirectory() as d:
        prompts = Path(d) / "p.jsonl"
        with open(prompts, "wb") as f:
            for i in range(rows):
                f.write(
                    orjson.dumps({"id": f"p{i}", "messages": [{"role": "user", "content": f"Name one color. ({i})"}]})
                    + b"\n"
                )
        cfg = GenerateConfig(
            prompts=prompts,
            output_dir=Path(d) / "out",
            endpoints=endpoints,
            model="null",
            max_tokens=16,
            concurrency=64,
        )
        cpu0 = time.process_time()
        if mode == "off":
            stats = generate(cfg, handle_signals=False)
        else:
            with MetricsServer() as server:
                stop = threading.Event()

                def scrape() -> None:
                    while not stop.wait(scrape_every_s):
                        urllib.request.urlopen(server.url, timeout=5).read()

                if mode == "scraped":
                    threading.Thread(target=scrape, daemon=True).start()
                stats = asyncio.run(generate_run(cfg, handle_signals=False, metrics=server))
                stop.set()
        print(json.dumps({"cpu_us_per_req": 1e6 * (time.process_time() - cpu0) / stats.ok}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--child", choices=MODES)
    ap.add_argument("--endpoints", nargs="+")
    ap.add_argument("--rows", type=int, default=10000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--scrape-every", type=float, default=1.0)
    ap.add_argument("--replicas", type=int, default=8)
    args = ap.parse_args()
    if args.child:
        return child(args.child, args.endpoints, args.rows, args.scrape_every)
    ports = []
    for _ in range(args.replicas):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    server = subprocess.Popen(
        ["taskset", "-c", "1", sys.executable, str(ROOT / "bench/null_server.py"), "--ports", *map(str, ports)]
    )
    runs: dict[str, list[float]] = {m: [] for m in MODES}
    try:
        time.sleep(2)
        endpoints = [f"http://127.0.0.1:{p}" for p in ports]
        for i in range(args.repeats):
            for mode in MODES if i % 2 == 0 else MODES[::-1]:
                out = subprocess.run(
                    [
                        "taskset",
                        "-c",
                        "0",
                        sys.executable,
                        __file__,
                        "--child",
                        mode,
                        "--rows",
                        str(args.rows),
                        "--scrape-every",
                        str(args.scrape_every),
                        "--endpoints",
                        *endpoints,
                    ],
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout
                runs[mode].append(json.loads(out.strip().splitlines()[-1])["cpu_us_per_req"])
                print(f"repeat {i + 1} {mode}: {runs[mode][-1]:.1f} us CPU per request", file=sys.stderr)
    finally:
        server.kill()
        server.wait()
    print(f"CPU us per request, medians of {args.repeats} (load {os.getloadavg()[0]:.1f}):")
    for mode in MODES:
        print(f"  {mode:8} {statistics.median(runs[mode]):7.1f}   runs: {', '.join(f'{v:.0f}' for v in runs[mode])}")


if __name__ == "__main__":
    main()
