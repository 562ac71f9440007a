"""How fast one `fleetgen generate` client can go when the servers cost nothing: its own ceiling.

Starts N stand-in servers (tests/generate/standin_server.py, zero delay) as separate processes,
runs one generate client over `--rows` prompts, and reports rows/s (= requests/s = journal lines/s
at samples=1), the client's CPU seconds per 1,000 rows and its peak RSS. Feeds the 1,000-GPU plan
in docs/multinode.md. Usage: .venv/bin/python bench/client_ceiling.py [--rows 20000] [--servers 4]
"""

from __future__ import annotations

import argparse
import json
import resource
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(url: str) -> None:
    for _ in range(100):
        try:
            urllib.request.urlopen(url + "/health", timeout=1)
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} never answered")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--servers", type=int, default=4)
    ap.add_argument("--concurrency", type=int, default=64, help="requests in flight per server")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    ports = [_free_port() for _ in range(args.servers)]
    servers = [
        subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "tests/generate/standin_server.py"),
                "--port",
                str(p),
                "--max-concurrent",
                str(args.concurrency),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for p in ports
    ]
    try:
        for p in ports:
            _wait(f"http://127.0.0.1:{p}")
        with tempfile.TemporaryDirectory() as d:
            prompts = Path(d) / "p.jsonl"
            with open(prompts, "w") as f:
                for i in range(args.rows):
                    f.write(
                        json.dumps({"id": f"p{i}", "messages": [{"role": "user", "content": f"Name one color. ({i})"}]})
                        + "\n"
                    )
            cmd = [
                sys.executable,
                "-m",
                "fleetgen.cli.app",
                "generate",
                str(prompts),
                "-o",
                str(Path(d) / "out"),
                "--model",
                "standin",
                "--max-tokens",
                "8",
                "--concurrency",
                str(args.concurrency),
                "--no-hedge",
            ]
            for p in ports:
                cmd += ["--endpoint", f"http://127.0.0.1:{p}"]
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.monotonic()
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wall = time.monotonic() - t0
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            lines = sum(1 for _ in open(Path(d) / "out" / "results.jsonl", "rb"))
            size = (Path(d) / "out" / "results.jsonl").stat().st_size
    finally:
        for s in servers:
            s.kill()
            s.wait()
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    report = {
        "rows": args.rows,
        "servers": args.servers,
        "in_flight": args.servers * args.concurrency,
        "wall_s": round(wall, 1),
        "rows_per_s": round(lines / wall, 1),
        "client_cpu_s_per_1k_rows": round(1000 * cpu / lines, 2),
        "client_peak_rss_mib": round(after.ru_maxrss / 1024, 1),
        "journal_bytes_per_row": round(size / lines),
    }
    print(json.dumps(report, indent=2))
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
