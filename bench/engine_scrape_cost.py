"""What one load poll costs a real vLLM-CPU replica: the whole /metrics page vs the load lines alone.

`--concurrency auto` polls each replica once a second. The engine renders the page on its API-server
thread, the one that streams every answer out, so its cost is taken from the job. Arms, alternating
each repeat, each `--scrapes` GETs back to back on one connection:

- whole: the whole page, as the poller read it before 2026-12-05 (vLLM serves it unzipped whatever is asked);
- load lines: `/metrics/?name[]=...` for the engine's load metrics, unzipped (the poller since).

The cost of a scrape is the replica's own CPU (its process tree, user + system) over the arm, less
what it burns idle over as long, divided by the scrapes. Run it under the engine lock:

    flock /tmp/fleetgen-engine.lock .venv/bin/python bench/engine_scrape_cost.py
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from real_fleet import start_fleet  # noqa: E402

from fleetgen.fleet import down, read_state  # noqa: E402
from fleetgen.fleet.engines import get_engine  # noqa: E402
from fleetgen.fleet.usage import cpu_seconds_of  # noqa: E402
from fleetgen.generate.dispatch.load_poll import load_page  # noqa: E402

ARMS = {"whole": ("/metrics", {}), "load lines": (load_page(get_engine("vllm")), {"Accept-Encoding": "identity"})}


def replica_cpu_s(fleet: Path) -> float:
    """User + system CPU of the replicas' process trees: the work they did, whatever the neighbours did."""
    return sum(cpu_seconds_of(r) for r in read_state(fleet).replicas)


async def one_arm(http: aiohttp.ClientSession, fleet: Path, path: str, headers: dict, n: int) -> dict:
    url = read_state(fleet).endpoints[0] + path
    cpu0, t0, size = replica_cpu_s(fleet), time.monotonic(), 0
    for _ in range(n):
        async with http.get(url, headers=headers) as r:
            size = len(await r.read())
    took, cpu = time.monotonic() - t0, replica_cpu_s(fleet) - cpu0
    cpu1 = replica_cpu_s(fleet)
    await asyncio.sleep(took)  # as long again, idle: what the replica burns doing nothing
    idle = replica_cpu_s(fleet) - cpu1
    return {
        "ms_cpu_per_scrape": round(1000 * (cpu - idle) / n, 2),
        "ms_wall_per_scrape": round(1000 * took / n, 2),
        "bytes_sent": size,
    }


async def main_async(args) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="scrape-cost-"))
    fleet = args.fleet or tmp / "fleet"
    if not args.fleet:
        print("starting 1 vLLM-CPU replica ...", flush=True)
        await asyncio.to_thread(start_fleet, fleet, 1)
    runs: list[dict] = []
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as http:
            names = list(ARMS)
            for rep in range(args.repeats):
                for name in names[rep % len(names) :] + names[: rep % len(names)]:
                    path, headers = ARMS[name]
                    runs.append({"arm": name, "repeat": rep, **await one_arm(http, fleet, path, headers, args.scrapes)})
                    print(json.dumps(runs[-1]), flush=True)
    finally:
        if not args.fleet:
            down(fleet, grace_s=10)
    t = Table(title=f"one poll of a real vLLM-CPU replica ({args.scrapes} scrapes an arm, {args.repeats} repeats)")
    for col in ("page", "bytes sent", "replica CPU ms / scrape (median)", "runs", "wall ms / scrape"):
        t.add_column(col)
    summary = {}
    for name in ARMS:
        mine = [r for r in runs if r["arm"] == name]
        summary[name] = statistics.median(r["ms_cpu_per_scrape"] for r in mine)
        t.add_row(
            name,
            str(mine[-1]["bytes_sent"]),
            f"{summary[name]:.2f}",
            " / ".join(f"{r['ms_cpu_per_scrape']:.2f}" for r in mine),
            f"{statistics.median(r['ms_wall_per_scrape'] for r in mine):.2f}",
        )
    Console(width=150).print(t)
    return {"scrapes": args.scrapes, "repeats": args.repeats, "runs": runs, "median_ms_cpu": summary}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scrapes", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--fleet", type=Path, default=None, help="a fleet already up (its first replica is scraped)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/engine_scrape_cost.json")
    args = ap.parse_args()
    result = asyncio.run(main_async(args))
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
