"""One client process vs N `--shard` processes against the NULL SERVER (bench/null_server.py; not an engine).

The null server answers every chat completion at once, on R ports (R simulated replicas), in its
own process. Arm "1": one `generate()` process does all rows. Arm "N": N processes, each
`--shard i/N` of the same job into the same output directory, started together. Each client keeps
R x W requests in flight (the seed job's 8 x 64), journal and fsync included. Reported: rows/s over
the arm's wall time (first start to last exit, interpreter start included) and over the longest
`generate()` call, and CPU seconds per request (the clients' user+sys over all rows). Arms
alternate `--repeats` times; every arm checks that each (id, sample) landed exactly once.

Usage: .venv/bin/python bench/shard_bench.py [--rows 20000] [--shards 2] [--repeats 3] [--out bench/results/shard_bench.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child(prompts: Path, outdir: Path, endpoints: list[str], window: int, shard: str | None) -> None:
    import resource

    from fleetgen.generate import GenerateConfig, generate

    cfg = GenerateConfig(prompts=prompts, output_dir=outdir, endpoints=endpoints, model="null", max_tokens=16,
                         concurrency=window, shard=shard)
    t0, c0 = time.monotonic(), time.process_time()
    stats = generate(cfg, handle_signals=False)
    wall, cpu_in = time.monotonic() - t0, time.process_time() - c0
    r = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"shard": shard, "ok": stats.ok, "generate_s": wall, "cpu_s": r.ru_utime + r.ru_stime,
                      "cpu_in_generate_s": cpu_in}))


def run_arm(n: int, prompts: Path, outdir: Path, endpoints: list[str], window: int) -> dict:
    shutil.rmtree(outdir, ignore_errors=True)
    base = [sys.executable, __file__, "--child", "--prompts", str(prompts), "--outdir", str(outdir), "--window", str(window),
            *[x for e in endpoints for x in ("--endpoint", e)]]
    t0 = time.monotonic()
    procs = [subprocess.Popen([*base, *(["--shard", f"{i}/{n}"] if n > 1 else [])], stdout=subprocess.PIPE, text=True)
             for i in range(n)]
    outs = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
    wall = time.monotonic() - t0
    assert all(p.returncode == 0 for p in procs)
    keys = Counter((r["id"], r["sample"]) for f in outdir.glob("results*.jsonl") for r in map(orjson.loads, f.read_bytes().splitlines()))
    rows = sum(o["ok"] for o in outs)
    assert len(keys) == rows and max(keys.values()) == 1, "not exactly once"
    cpu = sum(o["cpu_s"] for o in outs)
    cpu_in = sum(o["cpu_in_generate_s"] for o in outs)
    return {"processes": n, "rows": rows, "wall_s": wall, "rows_per_s": rows / wall,
            "cpu_us_per_request_in_generate": 1e6 * cpu_in / rows,
            "generate_s": max(o["generate_s"] for o in outs), "rows_per_s_in_generate": rows / max(o["generate_s"] for o in outs),
            "cpu_s": cpu, "cpu_us_per_request": 1e6 * cpu / rows, "per_process": outs}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--prompts", type=Path)
    ap.add_argument("--outdir", type=Path)
    ap.add_argument("--endpoint", action="append", default=[])
    ap.add_argument("--window", type=int, default=64)
    ap.add_argument("--shard")
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--replicas", type=int, default=8)
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/shard_bench.json")
    args = ap.parse_args()
    if args.child:
        return child(args.prompts, args.outdir, args.endpoint, args.window, args.shard)

    work = Path(tempfile.mkdtemp(prefix="fleetgen-shard-bench-"))
    ports = [_free_port() for _ in range(args.replicas)]
    server = subprocess.Popen([sys.executable, str(ROOT / "bench/null_server.py"), "--ports", *map(str, ports)])
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{ports[-1]}/health", timeout=1).read()
                break
            except OSError:
                time.sleep(0.1)
        prompts = work / "p.jsonl"
        with open(prompts, "wb") as f:
            for i in range(args.rows):
                f.write(orjson.dumps({"id": f"p{i}", "messages": [{"role": "user", "content": f"Name one color. ({i})"}]}) + b"\n")
        endpoints = [f"http://127.0.0.1:{p}" for p in ports]
        runs: dict[str, list[dict]] = {"1": [], str(args.shards): []}
        for _ in range(args.repeats):
            for arm in runs:
                r = run_arm(int(arm), prompts, work / "out", endpoints, args.window)
                runs[arm].append(r)
                print(f"{arm} process(es): {r['rows']:,} rows, {r['rows_per_s']:,.0f} rows/s over {r['wall_s']:.2f} s "
                      f"({r['rows_per_s_in_generate']:,.0f}/s inside generate), {r['cpu_us_per_request']:.0f} us CPU per request "
                      f"({r['cpu_us_per_request_in_generate']:.0f} inside generate)",
                      flush=True)
        med = {arm: {k: sorted(r[k] for r in rs)[len(rs) // 2] for k in ("rows_per_s", "rows_per_s_in_generate", "cpu_us_per_request", "cpu_us_per_request_in_generate")}
               for arm, rs in runs.items()}
        print(json.dumps(med, indent=1))
    finally:
        server.kill()
        server.wait()
        shutil.rmtree(work, ignore_errors=True)
    report = {"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores", "rows": args.rows,
              "replicas": args.replicas, "window": args.window, "runs": runs, "medians": med}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
