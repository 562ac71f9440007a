"""One client process vs N shards against the NULL SERVER
(bench/null_server.py; not an engine): processes and Ray tasks.

The null server answers every chat completion at once, on R ports (R simulated replicas), in its
own process. Arms, all writing the same job into one output directory:
  "1":       one `generate()` process does all rows;
  "N":       N plain processes started together, `--shard i/N --replica-slice i/N` each (what
             `--shards N` hands each shard: its own R/N replicas, whole windows);
  "ray-1", "ray-N": `run_shards` (`generate --shards K --shard-runner ray`) with K = 1 and N, each
             shard a Ray task on a local Ray instance the benchmark starts (ray.init, N CPUs; not
             counted in the arm's time), its workers warmed once by a 400-row run (Ray reuses them).
Each replica gets W requests in flight (the seed job's 8 x 64 in all), journal and fsync included.
Reported: rows/s over the arm's wall time (first start to last exit: interpreter start included
for processes; task submission to the last result for Ray) and over the longest `generate()` call,
and CPU seconds per request: the clients' user+sys over all rows (for Ray: the worker processes
that ran the shards, by pid, plus the driver; and separately the Ray daemons' CPU in the same
time). Arms alternate `--repeats` times; every arm checks that each (id, sample) landed exactly once.

`--choice-only` measures instead what one request's replica choice costs a process that drives R
replicas (the dispatcher scans them: least outstanding), for R = 16 ... 10,000, in this process.

Usage: .venv/bin/python bench/shard_bench.py [--rows 20000] [--shards 2] [--repeats 3] [--no-ray] [--out
bench/results/shard_bench.json]
       .venv/bin/python bench/shard_bench.py --choice-only   # adds choice_us_by_replicas to --out
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
import psutil

ROOT = Path(__file__).resolve().parents[1]


def _max_tokens() -> int:
    return int(os.environ.get("SHARD_BENCH_MAX_TOKENS", "16"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child(prompts: Path, outdir: Path, endpoints: list[str], window: int, shard: str | None, event_loop: str) -> None:
    import resource

    from fleetgen.generate import GenerateConfig, generate

    cfg = GenerateConfig(
        prompts=prompts,
        output_dir=outdir,
        endpoints=endpoints,
        model="null",
        max_tokens=_max_tokens(),
        concurrency=window,
        shard=shard,
        replica_slice=shard,
        event_loop=event_loop,
    )
    t0, c0 = time.monotonic(), time.process_time()
    stats = generate(cfg, handle_signals=False)
    wall, cpu_in = time.monotonic() - t0, time.process_time() - c0
    r = resource.getrusage(resource.RUSAGE_SELF)
    print(
        json.dumps(
            {
                "shard": shard,
                "ok": stats.ok,
                "generate_s": wall,
                "cpu_s": r.ru_utime + r.ru_stime,
                "cpu_in_generate_s": cpu_in,
            }
        )
    )


def _exactly_once(outdir: Path, rows: int) -> None:
    keys = Counter(
        (r["id"], r["sample"])
        for f in outdir.glob("results*.jsonl")
        for r in map(orjson.loads, f.read_bytes().splitlines())
    )
    assert len(keys) == rows and max(keys.values()) == 1, "not exactly once"


def run_arm(n: int, prompts: Path, outdir: Path, endpoints: list[str], window: int, event_loop: str) -> dict:
    shutil.rmtree(outdir, ignore_errors=True)
    base = [
        sys.executable,
        __file__,
        "--child",
        "--prompts",
        str(prompts),
        "--outdir",
        str(outdir),
        "--window",
        str(window),
        "--event-loop",
        event_loop,
        *[x for e in endpoints for x in ("--endpoint", e)],
    ]
    t0 = time.monotonic()
    procs = [
        subprocess.Popen([*base, *(["--shard", f"{i}/{n}"] if n > 1 else [])], stdout=subprocess.PIPE, text=True)
        for i in range(n)
    ]
    outs = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
    wall = time.monotonic() - t0
    assert all(p.returncode == 0 for p in procs)
    rows = sum(o["ok"] for o in outs)
    _exactly_once(outdir, rows)
    cpu = sum(o["cpu_s"] for o in outs)
    cpu_in = sum(o["cpu_in_generate_s"] for o in outs)
    return {
        "arm": str(n),
        "processes": n,
        "rows": rows,
        "wall_s": wall,
        "rows_per_s": rows / wall,
        "cpu_us_per_request_in_generate": 1e6 * cpu_in / rows,
        "generate_s": max(o["generate_s"] for o in outs),
        "rows_per_s_in_generate": rows / max(o["generate_s"] for o in outs),
        "cpu_s": cpu,
        "cpu_us_per_request": 1e6 * cpu / rows,
        "per_process": outs,
    }


def _cpu_of(procs: dict[int, psutil.Process]) -> dict[int, float]:
    out = {}
    for pid, p in procs.items():
        try:
            t = p.cpu_times()
            out[pid] = t.user + t.system
        except psutil.Error:
            pass
    return out


def run_ray_arm(
    n: int, prompts: Path, outdir: Path, endpoints: list[str], window: int, event_loop: str, server_pid: int
) -> dict:
    """`run_shards` with the Ray runner: n shard tasks on the local Ray instance."""
    from fleetgen.generate import GenerateConfig, run_shards

    shutil.rmtree(outdir, ignore_errors=True)
    cfg = GenerateConfig(
        prompts=prompts,
        output_dir=outdir,
        endpoints=endpoints,
        model="null",
        max_tokens=_max_tokens(),
        concurrency=window,
        shards=n,
        shard_runner="ray",
        event_loop=event_loop,
    )
    procs = {p.pid: p for p in psutil.Process().children(recursive=True) if p.pid != server_pid}
    before, me0 = _cpu_of(procs), time.process_time()
    t0 = time.monotonic()
    run = run_shards(cfg)
    wall = time.monotonic() - t0
    driver = time.process_time() - me0
    procs.update({p.pid: p for p in psutil.Process().children(recursive=True) if p.pid != server_pid})
    after = _cpu_of(procs)
    delta = {pid: after[pid] - before.get(pid, 0.0) for pid in after}
    workers = {int(o.where.rsplit("pid ", 1)[1].rstrip(")")) for o in run.outcomes}
    rows = run.stats["rows"]["ok"]
    _exactly_once(outdir, rows)
    shard_cpu = sum(delta.get(pid, 0.0) for pid in workers) + driver
    daemons = sum(v for pid, v in delta.items() if pid not in workers)
    gen_s = max(o.stats["wall_s"] for o in run.outcomes)
    return {
        "arm": f"ray-{n}",
        "processes": n,
        "rows": rows,
        "wall_s": wall,
        "rows_per_s": rows / wall,
        "generate_s": gen_s,
        "rows_per_s_in_generate": rows / gen_s,
        "cpu_s": shard_cpu,
        "cpu_us_per_request": 1e6 * shard_cpu / rows,
        "cpu_us_per_request_in_generate": None,
        "ray_daemons_cpu_s": daemons,
        "ray_daemons_cpu_us_per_request": 1e6 * daemons / rows,
        "per_shard": [
            {"where": o.where, "ok": o.stats["rows"]["ok"], "wall_s": o.stats["wall_s"]} for o in run.outcomes
        ],
    }


def choice_cost(sizes: tuple[int, ...] = (16, 156, 1000, 10000), window: int = 72) -> dict[str, float]:
    """Microseconds the dispatcher takes to choose a replica
    among R (least outstanding, prefix affinity on), ~90% full."""
    import asyncio
    from collections import deque

    from fleetgen.generate import GenerateConfig
    from fleetgen.generate.dispatch.dispatcher import Dispatcher

    job = GenerateConfig(prompts=Path("p"), output_dir=Path("o"), endpoints=["http://127.0.0.1:1"])

    async def one(r: int) -> float:
        d = Dispatcher([f"http://10.0.0.{i}:1" for i in range(r)], window, job.routing, job.transport)
        held: deque = deque()
        n = max(1000, 3_000_000 // r)
        t0 = time.perf_counter()
        for k in range(n):
            chosen = d._choose(f"k{k}")
            chosen.stats.outstanding += 1
            held.append(chosen)
            if len(held) > 0.9 * r * window:
                held.popleft().stats.outstanding -= 1
        return 1e6 * (time.perf_counter() - t0) / n

    return {str(r): round(asyncio.run(one(r)), 1) for r in sizes}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--prompts", type=Path)
    ap.add_argument("--outdir", type=Path)
    ap.add_argument("--endpoint", action="append", default=[])
    ap.add_argument("--window", type=int, default=64)
    ap.add_argument("--shard")
    ap.add_argument("--event-loop", default="asyncio", choices=["asyncio", "uvloop"])
    ap.add_argument("--no-ray", action="store_true", help="leave out the Ray arms")
    ap.add_argument("--answer-tokens", type=int, default=0, help="null server's answer length in words (0: 'Blue.')")
    ap.add_argument(
        "--prompt-tokens", type=int, default=12, help="prompt ids the null server returns with --answer-tokens"
    )
    ap.add_argument(
        "--choice-only",
        action="store_true",
        help="only measure the dispatcher's choice among 16..10,000 replicas; add it to --out",
    )
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--replicas", type=int, default=8)
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/shard_bench.json")
    args = ap.parse_args()
    if args.child:
        return child(args.prompts, args.outdir, args.endpoint, args.window, args.shard, args.event_loop)
    if args.choice_only:
        report = json.loads(args.out.read_text()) if args.out.exists() else {}
        report["choice_us_by_replicas"] = choice_cost()
        print("us to choose a replica, by replicas a process drives:", report["choice_us_by_replicas"])
        args.out.write_text(json.dumps(report, indent=2) + "\n")
        return None

    work = Path(tempfile.mkdtemp(prefix="fleetgen-shard-bench-"))
    ports = [_free_port() for _ in range(args.replicas)]
    server = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "bench/null_server.py"),
            "--ports",
            *map(str, ports),
            "--answer-tokens",
            str(args.answer_tokens),
            "--prompt-tokens",
            str(args.prompt_tokens),
        ]
    )
    os.environ["SHARD_BENCH_MAX_TOKENS"] = str(max(16, args.answer_tokens))  # children and Ray tasks read it
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
                f.write(
                    orjson.dumps({"id": f"p{i}", "messages": [{"role": "user", "content": f"Name one color. ({i})"}]})
                    + b"\n"
                )
        endpoints = [f"http://127.0.0.1:{p}" for p in ports]
        runs: dict[str, list[dict]] = {"1": [], str(args.shards): []}
        if not args.no_ray:
            import ray

            # Ray's OOM killer judges the whole machine, which others share here; the instance is ours and stops below.
            os.environ.setdefault("RAY_memory_monitor_refresh_ms", "0")
            ray.init(
                num_cpus=args.shards,
                include_dashboard=False,
                object_store_memory=100 * 2**20,
                namespace="fleetgen",
                log_to_driver=False,
                logging_level="WARNING",
            )
            runs.update({"ray-1": [], f"ray-{args.shards}": []})
            # Warm the workers once (imports, first connections): Ray
            # reuses them, so every timed Ray arm finds them warm.
            warm = work / "warm.jsonl"
            warm.write_bytes(b"".join(line + b"\n" for line in prompts.read_bytes().splitlines()[:400]))
            run_ray_arm(args.shards, warm, work / "out", endpoints, args.window, args.event_loop, server.pid)
        for _ in range(args.repeats):
            for arm in runs:
                if arm.startswith("ray-"):
                    r = run_ray_arm(
                        int(arm[4:]), prompts, work / "out", endpoints, args.window, args.event_loop, server.pid
                    )
                else:
                    r = run_arm(int(arm), prompts, work / "out", endpoints, args.window, args.event_loop)
                runs[arm].append(r)
                inside = r["cpu_us_per_request_in_generate"]
                print(
                    f"{arm:>6}: {r['rows']:,} rows, {r['rows_per_s']:,.0f} rows/s over {r['wall_s']:.2f} s "
                    f"({r['rows_per_s_in_generate']:,.0f}/s inside generate), {r['cpu_us_per_request']:.0f} us CPU per "
                    "request"
                    + (
                        f" ({inside:.0f} inside generate)"
                        if inside is not None
                        else f" (+{r['ray_daemons_cpu_us_per_request']:.0f} in Ray's daemons)"
                    ),
                    flush=True,
                )
        keys = (
            "rows_per_s",
            "rows_per_s_in_generate",
            "cpu_us_per_request",
            "cpu_us_per_request_in_generate",
            "ray_daemons_cpu_us_per_request",
        )
        med = {
            arm: {k: sorted(r[k] for r in rs)[len(rs) // 2] for k in keys if rs[0].get(k) is not None}
            for arm, rs in runs.items()
        }
        print(json.dumps(med, indent=1))
    finally:
        if not args.no_ray:
            import ray

            ray.shutdown()
        server.kill()
        server.wait()
        shutil.rmtree(work, ignore_errors=True)
    report = {
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "rows": args.rows,
        "answer_tokens": args.answer_tokens,
        "prompt_tokens": args.prompt_tokens,
        "replicas": args.replicas,
        "window": args.window,
        "event_loop": args.event_loop,
        "runs": runs,
        "medians": med,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
