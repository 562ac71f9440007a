"""What the metrics cost, measured in isolation: one scrape (collect + render) and one latency observation.

A scrape is paid once per scrape interval, whatever the request rate; the latency observation is the
only work a request does for the metrics (the counters it advances exist without them). This splits
what bench/client_overhead.py --metrics sees as a whole, on a machine too noisy to resolve 1 us.

Usage: .venv/bin/python bench/metrics_cost.py [--replicas 8] [--scrapes 300]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
import timeit
import urllib.request

from prometheus_client import generate_latest

from fleetgen.generate.observe.stats import LatencyHistogram, ReplicaStats, Stats
from fleetgen.metrics import MetricsServer


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--replicas", type=int, default=8)
    ap.add_argument("--scrapes", type=int, default=300)
    ap.add_argument(
        "--req-per-s", type=float, default=2786.0, help="the client's ceiling (BENCHMARKS.md) for the per-request share"
    )
    ap.add_argument("--interval-s", type=float, default=15.0, help="Prometheus scrape interval")
    args = ap.parse_args()

    stats = Stats(total=579_000, ok=123_456, errors=12, completion_tokens=98_765_432)
    stats.replicas = [
        ReplicaStats(index=i, endpoint=f"http://127.0.0.1:{30000 + i}", window=72) for i in range(args.replicas)
    ]
    for r in stats.replicas:
        for v in (0.3, 2.0, 17.0, 45.0):
            r.latency.observe(v)
    with MetricsServer() as server:
        server.show_generate(stats)
        t = time.process_time()
        for _ in range(args.scrapes):
            body = generate_latest(server.registry)
        render_ms = 1000 * (time.process_time() - t) / args.scrapes
        t = time.perf_counter()
        for _ in range(50):
            urllib.request.urlopen(server.url, timeout=5).read()
        http_ms = 1000 * (time.perf_counter() - t) / 50
    h = LatencyHistogram()
    n = 500_000
    observe_ns = 1e9 * min(timeit.repeat(lambda: h.observe(0.37), number=n, repeat=5)) / n
    empty_ns = 1e9 * min(timeit.repeat(lambda: None, number=n, repeat=5)) / n
    per_req_scrape_us = 1000 * render_ms / (args.interval_s * args.req_per_s)
    out = {
        "machine": (
            f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}"
        ),
        "replicas": args.replicas,
        "page_bytes": len(body),
        "scrape_cpu_ms": round(render_ms, 3),
        "scrape_http_wall_ms": round(http_ms, 3),
        "observe_ns": round(observe_ns - empty_ns, 1),
        "scrape_share_per_request_us": round(per_req_scrape_us, 4),
        "assumed": {"req_per_s": args.req_per_s, "interval_s": args.interval_s},
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
