"""The client's ceiling and overhead: `generate` vs a bare aiohttp loop against the NULL SERVER.

Both clients run pinned to one core (taskset -c CLIENT_CORE), the null server (bench/null_server.py:
answers every chat completion instantly; not an engine) in its own process on the other core. Each
arm is a fresh child process that sends the same requests (same body, same endpoints, same number
in flight) and reports requests/s, latency and its CPU time; arms alternate, `--repeats` times.

- throughput mode: R replicas (ports) x W in flight each, the seed job's 8 x 64 by default;
- cycle mode: 1 replica x 1 in flight; the null server timestamps each arrival, so the gap between
  consecutive arrivals is one full client cycle, measured the same way for both clients.

fleetgen's overhead per request = its CPU time per request minus the bare loop's; what that costs on
a real engine is that overhead over the request's duration there (see BENCHMARKS.md).

Usage: .venv/bin/python bench/client_overhead.py [--rows 20000] [--repeats 3] [--out bench/results/client_overhead.json]
       add --metrics for a third arm: generate with its Prometheus port open and scraped every --scrape-every s.
       add --base-src [LABEL=]DIR (repeatable) for an arm fleetgen-LABEL (default label: base): the fleetgen arm
       on another source tree (e.g. `git archive main src | tar -x -C DIR/..`), for before/after in one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
MAX_TOKENS = 16


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> bytes:
    return urllib.request.urlopen(url, timeout=5).read()


def _prompts(path: Path, n: int) -> None:
    with open(path, "wb") as f:
        for i in range(n):
            f.write(
                orjson.dumps({"id": f"p{i}", "messages": [{"role": "user", "content": f"Name one color. ({i})"}]})
                + b"\n"
            )


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


# --- the two clients (each runs in a child process) ---------------------------------------------


async def _bare(prompts: Path, endpoints: list[str], window: int) -> dict:
    """The plain saturating client: the same bodies, `window` in flight per endpoint, nothing else."""
    import aiohttp

    rows = [orjson.loads(line) for line in open(prompts, "rb")]
    latencies: list[float] = []
    connector = aiohttp.TCPConnector(limit=len(endpoints) * window + 16, limit_per_host=0, keepalive_timeout=60)
    it = iter(rows)

    async def worker(session: aiohttp.ClientSession, endpoint: str) -> None:
        for row in it:
            body = {
                "model": "null",
                "messages": row["messages"],
                "max_tokens": MAX_TOKENS,
                "temperature": 0.7,
                "top_p": 1.0,
            }
            t0 = time.monotonic()
            async with session.post(
                endpoint + "/v1/chat/completions", data=orjson.dumps(body), headers={"Content-Type": "application/json"}
            ) as r:
                payload = orjson.loads(await r.read())
            assert payload["choices"][0]["message"]["content"]
            latencies.append(time.monotonic() - t0)

    async with aiohttp.ClientSession(connector=connector) as session:
        t0 = time.monotonic()
        await asyncio.gather(*(worker(session, e) for e in endpoints for _ in range(window)))
        wall = time.monotonic() - t0
    return {"completed": len(latencies), "wall_s": wall, "latencies": latencies}


def _fleetgen(
    prompts: Path, endpoints: list[str], window: int, scrape_every_s: float | None = None, event_loop: str = "asyncio"
) -> dict:
    """generate() as users run it; with `scrape_every_s`, its metrics port open and scraped that often meanwhile."""
    import threading

    from fleetgen.generate import GenerateConfig, generate
    from fleetgen.generate import run as generate_run
    from fleetgen.metrics import MetricsServer

    with tempfile.TemporaryDirectory() as d:
        cfg = GenerateConfig(
            prompts=prompts,
            output_dir=Path(d),
            endpoints=endpoints,
            model="null",
            max_tokens=MAX_TOKENS,
            concurrency=window,
            event_loop=event_loop,
        )
        scrapes = []
        t0 = time.monotonic()
        if scrape_every_s is None:
            stats = generate(cfg, handle_signals=False)
        else:
            with MetricsServer() as server:  # the same server and collectors `--metrics-port` opens
                done = threading.Event()

                def scraper() -> None:  # a Prometheus stand-in in this process: its CPU counts against the arm
                    while not done.wait(scrape_every_s):
                        scrapes.append(len(_get(server.url)))

                t = threading.Thread(target=scraper, daemon=True)
                t.start()
                stats = asyncio.run(generate_run(cfg, handle_signals=False, metrics=server))
                done.set()
                t.join()
        wall = time.monotonic() - t0
        latencies = [orjson.loads(line)["timing"]["latency_s"] for line in open(Path(d) / "results.jsonl", "rb")]
    return {"completed": stats.ok, "wall_s": wall, "latencies": latencies, "scrapes": len(scrapes)}


def child(arm: str, prompts: Path, endpoints: list[str], window: int, scrape_every_s: float) -> None:
    import aiohttp  # noqa: F401  imports are not the clients' work: load them before the clock starts

    import fleetgen.generate  # noqa: F401

    r0 = resource.getrusage(resource.RUSAGE_SELF)
    # Arms: bare / fleetgen / fleetgen-metrics on asyncio's loop; a "-uvloop" suffix runs the client on uvloop's.
    loop = "uvloop" if arm.endswith("-uvloop") else "asyncio"
    if arm == "bare-gctuned":  # the bare loop under the collector settings fleetgen's run loop uses
        from fleetgen.generate.gc_tuning import fewer_collections

        with fewer_collections():
            out = asyncio.run(_bare(prompts, endpoints, window))
    elif arm.startswith("bare"):
        if loop == "uvloop":
            import uvloop

            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                out = runner.run(_bare(prompts, endpoints, window))
        else:
            out = asyncio.run(_bare(prompts, endpoints, window))
    else:
        out = _fleetgen(prompts, endpoints, window, scrape_every_s if arm == "fleetgen-metrics" else None, loop)
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    lat = out.pop("latencies")
    out["cpu_s"] = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    out["p50_ms"], out["p99_ms"] = 1000 * _pct(lat, 0.5), 1000 * _pct(lat, 0.99)
    out["peak_rss_mib"] = r1.ru_maxrss / 1024
    print(json.dumps(out))


# --- the parent: server, arms, table --------------------------------------------------------------


def _run_arm(
    arm: str,
    prompts: Path,
    ports: list[int],
    window: int,
    core: int,
    scrape_every_s: float = 1.0,
    trees: dict[str, Path] | None = None,
) -> dict:
    endpoints = [f"http://127.0.0.1:{p}" for p in ports]
    _get(f"http://127.0.0.1:{ports[0]}/_arrivals")  # clear
    env = None
    if arm in (trees or {}):  # the fleetgen arm, on the code of that --base-src
        env = {**os.environ, "PYTHONPATH": str(trees[arm])}  # type: ignore[index]
        arm = "fleetgen"
    cmd = [
        "taskset",
        "-c",
        str(core),
        sys.executable,
        __file__,
        "--child",
        arm,
        "--prompts",
        str(prompts),
        "--window",
        str(window),
        "--scrape-every",
        str(scrape_every_s),
        "--endpoints",
        *endpoints,
    ]
    res = json.loads(
        subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout.strip().splitlines()[-1]
    )
    arrivals = orjson.loads(_get(f"http://127.0.0.1:{ports[0]}/_arrivals"))
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]
    res["cycle_p50_us"], res["cycle_p99_us"] = 1e6 * _pct(gaps, 0.5), 1e6 * _pct(gaps, 0.99)
    res["req_per_s"] = res["completed"] / res["wall_s"]
    res["cpu_us_per_req"] = 1e6 * res["cpu_s"] / res["completed"]
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--child", choices=["bare", "fleetgen", "fleetgen-metrics", "bare-uvloop", "fleetgen-uvloop", "bare-gctuned"]
    )
    ap.add_argument(
        "--arms",
        default="bare,fleetgen",
        help="comma-separated: bare, fleetgen, bare-uvloop, fleetgen-uvloop, bare-gctuned (gc_tuning.py's settings)",
    )
    ap.add_argument("--prompts", type=Path)
    ap.add_argument("--endpoints", nargs="+")
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--cycle-rows", type=int, default=3000)
    ap.add_argument("--replicas", type=int, default=8)
    ap.add_argument("--window", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--client-core", type=int, default=0)
    ap.add_argument("--server-core", type=int, default=1)
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/client_overhead.json")
    ap.add_argument(
        "--metrics",
        action="store_true",
        help="add the arm fleetgen-metrics: generate with its metrics port open and scraped every --scrape-every s",
    )
    ap.add_argument("--scrape-every", type=float, default=1.0)
    ap.add_argument(
        "--base-src",
        action="append",
        default=[],
        metavar="[LABEL=]DIR",
        help="another source tree: adds the arm fleetgen-LABEL (default: fleetgen-base), fleetgen on that code",
    )
    args = ap.parse_args()
    if args.child:
        return child(args.child, args.prompts, args.endpoints, args.window, args.scrape_every)
    arms = args.arms.split(",") + (["fleetgen-metrics"] if args.metrics else [])
    trees = {}
    for spec in args.base_src:
        label, _, path = spec.rpartition("=")
        trees[f"fleetgen-{label or 'base'}"] = Path(path)
    arms += [a for a in trees if a not in arms]

    ports = [_free_port() for _ in range(args.replicas)]
    server = subprocess.Popen(
        [
            "taskset",
            "-c",
            str(args.server_core),
            sys.executable,
            str(ROOT / "bench/null_server.py"),
            "--ports",
            *map(str, ports),
        ]
    )
    runs: dict[str, dict[str, list[dict]]] = {mode: {arm: [] for arm in arms} for mode in ("throughput", "cycle")}
    try:
        for _ in range(100):
            try:
                _get(f"http://127.0.0.1:{ports[-1]}/health")
                break
            except OSError:
                time.sleep(0.1)
        with tempfile.TemporaryDirectory() as d:
            big, small = Path(d) / "big.jsonl", Path(d) / "small.jsonl"
            _prompts(big, args.rows)
            _prompts(small, args.cycle_rows)
            for i in range(args.repeats):
                order = arms if i % 2 == 0 else arms[::-1]
                for arm in order:
                    runs["throughput"][arm].append(
                        _run_arm(arm, big, ports, args.window, args.client_core, args.scrape_every, trees)
                    )
                    runs["cycle"][arm].append(
                        _run_arm(arm, small, ports[:1], 1, args.client_core, args.scrape_every, trees)
                    )
                    print(
                        f"repeat {i + 1} {arm}: {runs['throughput'][arm][-1]['req_per_s']:.0f} req/s, "
                        f"cycle p50 {runs['cycle'][arm][-1]['cycle_p50_us']:.0f} us",
                        file=sys.stderr,
                    )
    finally:
        server.kill()
        server.wait()

    med = {
        mode: {arm: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for arm, rs in arms.items()}
        for mode, arms in runs.items()
    }
    t, c = med["throughput"], med["cycle"]
    b = t["bare"]
    f = t.get("fleetgen") or next(
        v for k, v in t.items() if k.startswith("fleetgen")
    )  # only other trees' arms: the first
    print(
        f"\nclient pinned to core {args.client_core}, null server on core {args.server_core}; medians of {args.repeats}"
    )
    for arm in arms:
        tp = t[arm]
        # The ceiling ratio by CPU per request (the steady number on a shared box), against the bare loop
        # on the same event loop where that arm runs.
        ref = t["bare-uvloop"] if arm.endswith("-uvloop") and "bare-uvloop" in t else b
        cpus = [r["cpu_us_per_req"] for r in runs["throughput"][arm]]
        print(
            f"{arm:20} {tp['req_per_s']:>8.0f} req/s  {tp['cpu_us_per_req']:>5.0f} us CPU/req "
            f"({min(cpus):.0f}-{max(cpus):.0f})  {ref['cpu_us_per_req'] / tp['cpu_us_per_req']:.2f}x bare by CPU  "
            f"{tp['req_per_s'] / b['req_per_s']:.2f}x bare by req/s  cycle p50 {c[arm]['cycle_p50_us']:.0f} us"
        )
    print(f"{'':34}{'bare aiohttp':>14}{'fleetgen':>12}{'fleetgen/bare':>15}")
    for label, key, fmt in [
        (f"req/s at {args.replicas}x{args.window} in flight", "req_per_s", "{:.0f}"),
        ("CPU us per request", "cpu_us_per_req", "{:.0f}"),
        ("latency p50 ms (at that load)", "p50_ms", "{:.1f}"),
        ("latency p99 ms (at that load)", "p99_ms", "{:.1f}"),
        ("peak RSS MiB", "peak_rss_mib", "{:.0f}"),
    ]:
        print(f"{label:34}{fmt.format(b[key]):>14}{fmt.format(f[key]):>12}{f[key] / b[key]:>15.2f}")
    for label, key in [("cycle p50 us (1 in flight)", "cycle_p50_us"), ("cycle p99 us (1 in flight)", "cycle_p99_us")]:
        cb, cf = c["bare"][key], c["fleetgen"][key]
        print(f"{label:34}{cb:>14.0f}{cf:>12.0f}{cf / cb:>15.2f}")
    added = f["cpu_us_per_req"] - b["cpu_us_per_req"]
    print(
        f"fleetgen's added CPU per request: {added:.0f} us; added cycle at 1 in flight: "
        f"p50 {c['fleetgen']['cycle_p50_us'] - c['bare']['cycle_p50_us']:.0f} us, "
        f"p99 {c['fleetgen']['cycle_p99_us'] - c['bare']['cycle_p99_us']:.0f} us"
    )
    if args.metrics:
        m, cm = t["fleetgen-metrics"], c["fleetgen-metrics"]
        print(f"\nmetrics on (port open, scraped every {args.scrape_every:g} s: {m['scrapes']:.0f} scrapes) vs off")
        print(f"{'':34}{'metrics off':>14}{'metrics on':>12}{'on/off':>15}")
        for label, key, fmt in [
            (f"req/s at {args.replicas}x{args.window} in flight", "req_per_s", "{:.0f}"),
            ("CPU us per request", "cpu_us_per_req", "{:.1f}"),
            ("latency p50 ms (at that load)", "p50_ms", "{:.1f}"),
            ("latency p99 ms (at that load)", "p99_ms", "{:.1f}"),
        ]:
            print(f"{label:34}{fmt.format(f[key]):>14}{fmt.format(m[key]):>12}{m[key] / f[key]:>15.3f}")
        for label, key in [
            ("cycle p50 us (1 in flight)", "cycle_p50_us"),
            ("cycle p99 us (1 in flight)", "cycle_p99_us"),
        ]:
            print(f"{label:34}{c['fleetgen'][key]:>14.0f}{cm[key]:>12.0f}{cm[key] / c['fleetgen'][key]:>15.3f}")
        print(f"metrics' added CPU per request: {m['cpu_us_per_req'] - f['cpu_us_per_req']:.1f} us")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "machine": (
                    f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
                    f"load {os.getloadavg()[0]:.1f}"
                ),
                "rows": args.rows,
                "cycle_rows": args.cycle_rows,
                "replicas": args.replicas,
                "window": args.window,
                "repeats": args.repeats,
                "median": med,
                "runs": runs,
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
