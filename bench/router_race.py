"""A standing race: the same fleetgen client routing itself vs pointed at vllm-router, on the same replicas.

Arm "fleetgen": `generate` with the fleet's replicas (its own least-outstanding dispatch, prefix
affinity, hedging). Arm "router <policy>": `generate` with one endpoint, a vllm-router (PyPI
`vllm-router`, `pip install 'fleetgen[bench]'`) that this script starts in front of the SAME replicas.
Total requests in flight are equal: fleetgen gets `--concurrency` per replica, the router's single
endpoint that times the number of replicas. Arms alternate within each repeat, the order rotating.

1. prefix: 2 real vLLM-CPU replicas serving SmolLM2 (started here, with the engine's default prefix
   caching), `--prompts` prompts x `--samples` samples, each prompt with its own ~`--words`-word
   context. Wall time and the engine's prefix-cache hit rate (vllm:prefix_cache_* deltas). Between
   arms the cache is emptied (POST /reset_prefix_cache, served because the replicas run with
   VLLM_SERVER_DEV_MODE=1) AND every arm gets contexts of its own, so no arm hits another's blocks.
   An extra arm "fleetgen no-hedge" shows what the tail's hedges cost (a job that fits in the window
   is all tail); an untimed warm-up run goes first.
2. unequal: two STAND-IN servers (tests/generate/standin_server.py, not engines) at 10 vs 40 ms/token.
4. shared: prompts that share a few long system prompts (tool schemas as text, as the Hermes
   function-calling set carries them), one sample each, so only routing ACROSS prompts can reuse a
   cached prefix: fleetgen's defaults (prefix routing), fleetgen with pins only (`prefix_routing`
   off: what it did before), and the router's `cache_aware`; hit rates as in 1. With `--kv-blocks`
   the replicas get a KV cache too small to hold every system prompt at once, where routing decides.
3. kill: kill -9 (the process group) of replica 1 once `--kill-at` of the rows are written; per arm the
   rows written, row errors, rows lost and duplicated (results + errors audited exactly-once against the
   prompt set) and whether the run finished. The killed replica is restarted before the next arm.

Start it under the engine lock, so no other fleet shares the cores or pollutes the cache:

    flock /tmp/fleetgen-engine.lock .venv/bin/python bench/router_race.py [--repeats 2] [--scenarios
    prefix,unequal,kill]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import aiohttp
import orjson
import psutil
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
for sub in ("tests", "tests/generate", "tests/faults"):
    sys.path.insert(0, str(ROOT / sub))
from faultkit import asdict_audit, audit  # noqa: E402
from real_fleet import free_port_base, start_fleet  # noqa: E402

from fleetgen.fleet import down, read_state  # noqa: E402
from fleetgen.fleet.engines.base import metric_totals  # noqa: E402
from fleetgen.fleet.launcher import restart_replica  # noqa: E402
from fleetgen.fleet.process import process_tree  # noqa: E402
from fleetgen.fleet.usage import cpu_seconds  # noqa: E402
from fleetgen.generate import GenerateConfig, Stats, run  # noqa: E402

ROUTER_VERSION = "0.1.17"  # the pin of the `bench` extra in pyproject.toml
VOCAB = "alpha beta gamma delta river stone cloud green paper seven blue orange window silver market".split()


# --- prompts ------------------------------------------------------------------------------


def write_prompts(path: Path, rows: list[dict]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return path


def context_prompts(n: int, words: int, seed: int, tag: str) -> list[dict]:
    """Each prompt carries a document of its own (about 1.3 tokens a word), shared only by its samples."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        doc = " ".join(rng.choice(VOCAB) for _ in range(words))
        rows.append(
            {
                "id": f"{tag}-{i}",
                "messages": [
                    {"role": "system", "content": f"Reference document {tag}-{i}: {doc}"},
                    {"role": "user", "content": "Summarize the document in one sentence."},
                ],
            }
        )
    return rows


def tool_schema_text(rng: random.Random, tools: int, tag: str) -> str:
    """A Hermes-style function-calling system prompt: `tools` function schemas as JSON text."""
    schemas = []
    for t in range(tools):
        name = "_".join(rng.choice(VOCAB) for _ in range(2)) + f"_{t}"
        props = {
            rng.choice(VOCAB) + f"_{k}": {
                "type": rng.choice(["string", "integer", "boolean"]),
                "description": " ".join(rng.choice(VOCAB) for _ in range(8)),
            }
            for k in range(4)
        }
        schemas.append(
            {
                "type": "function",
                "function": {
                    "name": name,
                    "description": " ".join(rng.choice(VOCAB) for _ in range(16)),
                    "parameters": {"type": "object", "properties": props, "required": list(props)[:2]},
                },
            }
        )
    return (
        f"You are a function calling AI model ({tag}). You are provided with function signatures within "
        f"<tools></tools> XML tags.\n<tools>\n{json.dumps(schemas)}\n</tools>\nCall a function when it helps."
    )


def shared_prompts(n: int, systems: int, tools: int, seed: int, tag: str) -> list[dict]:
    """`n` prompts, each with one of `systems` long system prompts (shuffled order) and a question of its own."""
    rng = random.Random(seed)
    texts = [tool_schema_text(rng, tools, f"{tag}-s{k}") for k in range(systems)]
    rows = [
        {
            "id": f"{tag}-{i}",
            "meta": {"system": i % systems},
            "messages": [
                {"role": "system", "content": texts[i % systems]},
                {"role": "user", "content": f"Request {i}: " + " ".join(rng.choice(VOCAB) for _ in range(12))},
            ],
        }
        for i in range(n)
    ]
    rng.shuffle(rows)
    return rows


def short_prompts(n: int, tag: str) -> list[dict]:
    return [
        {"id": f"{tag}-{i}", "messages": [{"role": "user", "content": f"Write about item {i} of {tag}."}]}
        for i in range(n)
    ]


# --- replicas -----------------------------------------------------------------------------


async def _get(http: aiohttp.ClientSession, url: str) -> tuple[int, str]:
    try:
        async with http.get(url, timeout=aiohttp.ClientTimeout(total=5)) as r:
            return r.status, await r.text()
    except (TimeoutError, aiohttp.ClientError) as e:
        return 0, str(e)


async def wait_healthy(urls: list[str], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    async with aiohttp.ClientSession() as http:
        for u in urls:
            while (await _get(http, u + "/health"))[0] != 200:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{u}/health did not answer 200 within {timeout_s:.0f} s")
                await asyncio.sleep(0.2)


async def counters(endpoints: list[str]) -> list[dict[str, float]]:
    """Per replica, from /metrics: prefix-cache hits and queries (tokens) and generated tokens."""
    out = []
    async with aiohttp.ClientSession() as http:
        for e in endpoints:
            status, text = await _get(http, e + "/metrics")
            m = metric_totals(text) if status == 200 else {}
            out.append(
                {
                    "hits": m.get("vllm:prefix_cache_hits_total", m.get("vllm:prefix_cache_hits", 0.0)),
                    "queries": m.get("vllm:prefix_cache_queries_total", m.get("vllm:prefix_cache_queries", 0.0)),
                    "generated": m.get("vllm:generation_tokens_total", m.get("vllm:generation_tokens", 0.0)),
                }
            )
    return out


class RealReplicas:
    """vLLM-CPU replicas of a fleet state directory: metrics, cache reset, kill -9 and restart."""

    kind = "real vLLM-CPU"

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.fleet_state: Path | None = state_dir
        self.refresh()

    def refresh(self) -> None:
        self.state = read_state(self.state_dir)
        self.endpoints = self.state.endpoints
        self.model = self.state.served_model_name

    async def counters(self) -> list[dict[str, float]]:
        return await counters(self.endpoints)

    async def reset_prefix_cache(self) -> bool:
        """Empty every replica's prefix cache; False where a replica does not serve the dev endpoint."""
        ok = True
        async with aiohttp.ClientSession() as http:
            for e in self.endpoints:
                try:
                    async with http.post(e + "/reset_prefix_cache", timeout=aiohttp.ClientTimeout(total=30)) as r:
                        ok = ok and r.status == 200
                except (TimeoutError, aiohttp.ClientError):
                    ok = False
        return ok

    def processes(self) -> list[psutil.Process]:
        return [p for r in self.state.replicas for p in process_tree(r.pid, r.create_time, r.boot_time)]

    def kill(self, index: int) -> None:
        os.killpg(self.state.replicas[index].pid, signal.SIGKILL)  # the server and its engine core, as a lost node

    async def restore(self, index: int) -> float:
        t0 = time.monotonic()
        await restart_replica(self.state_dir, index)
        self.refresh()
        return time.monotonic() - t0


class StandinReplicas:
    """STAND-IN servers (tests/generate/standin_server.py), one process each, with per-token delays."""

    kind = "stand-in servers"
    fleet_state = None
    model = "standin"

    def __init__(self, delays: list[float], max_concurrent: int) -> None:
        self.delays, self.max_concurrent = delays, max_concurrent
        base = free_port_base(len(delays), 18400)
        self.endpoints = [f"http://127.0.0.1:{base + i}" for i in range(len(delays))]
        self.procs = [self._spawn(i) for i in range(len(delays))]

    def _spawn(self, i: int) -> subprocess.Popen:
        return subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "tests/generate/standin_server.py"),
                "--port",
                self.endpoints[i].rsplit(":", 1)[1],
                "--delay-per-token",
                str(self.delays[i]),
                "--max-concurrent",
                str(self.max_concurrent),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    async def counters(self) -> list[dict[str, float]]:
        return await counters(self.endpoints)

    async def reset_prefix_cache(self) -> bool:
        return True

    def processes(self) -> list[psutil.Process]:
        return [psutil.Process(p.pid) for p in self.procs if p.poll() is None]

    def kill(self, index: int) -> None:
        os.killpg(self.procs[index].pid, signal.SIGKILL)
        self.procs[index].wait()

    async def restore(self, index: int) -> float:
        t0 = time.monotonic()
        self.procs[index] = self._spawn(index)
        await wait_healthy([self.endpoints[index]])
        return time.monotonic() - t0

    def stop(self) -> None:
        for p in self.procs:
            p.terminate()
            p.wait()


# --- the router ---------------------------------------------------------------------------


def find_router(explicit: str | None) -> str:
    """The vllm-router console script: --router-bin, else beside this interpreter, else on PATH."""
    for cand in (explicit, str(Path(sys.executable).with_name("vllm-router")), shutil.which("vllm-router")):
        if cand and Path(cand).is_file():
            return cand
    raise SystemExit("vllm-router not found: `pip install 'fleetgen[bench]'` (or pass --router-bin PATH)")


class Router:
    """vllm-router on 127.0.0.1 in front of `workers`, with one policy; its defaults otherwise."""

    def __init__(self, binary: str, workers: list[str], policy: str, log: Path) -> None:
        self.binary, self.workers, self.policy, self.log = binary, workers, policy, log
        self.endpoint = f"http://127.0.0.1:{free_port_base(1, 19400)}"
        self.proc: subprocess.Popen | None = None

    async def __aenter__(self) -> Router:
        port = self.endpoint.rsplit(":", 1)[1]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    self.binary,
                    "--host",
                    "127.0.0.1",
                    "--port",
                    port,
                    "--worker-urls",
                    *self.workers,
                    "--policy",
                    self.policy,
                    "--log-level",
                    "warning",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        await wait_healthy([self.endpoint])
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.proc is not None
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# --- one arm ------------------------------------------------------------------------------


async def one_arm(
    arm: str,
    replicas: RealReplicas | StandinReplicas,
    prompts: Path,
    tmp: Path,
    *,
    router: Router | None,
    concurrency: int,
    gen: dict,
    on_progress: Callable[[Stats], None] | None = None,
) -> dict:
    """One `generate` run, through the router or with the replicas themselves; counters around it."""
    out = Path(tempfile.mkdtemp(prefix="race-", dir=tmp))
    if router is None:
        where = {"fleet_state": replicas.fleet_state} if replicas.fleet_state else {"endpoints": replicas.endpoints}
        cfg = GenerateConfig(
            prompts=prompts, output_dir=out, model=replicas.model, concurrency=concurrency, **where, **gen
        )
    else:
        cfg = GenerateConfig(
            prompts=prompts,
            output_dir=out,
            endpoints=[router.endpoint],
            model=replicas.model,
            concurrency=concurrency * len(replicas.endpoints),
            **gen,
        )
    before = await replicas.counters()
    procs = replicas.processes()
    cpu0, client0 = cpu_seconds(procs), time.process_time()
    t0 = time.monotonic()
    stats = await run(cfg, on_progress=on_progress, handle_signals=False)
    wall = time.monotonic() - t0
    cpu1, client1 = cpu_seconds(procs), time.process_time()
    after = await replicas.counters()
    res = {
        "arm": arm,
        "wall_s": round(wall, 2),
        "ok": stats.ok,
        "errors": stats.errors,
        # The replicas' own CPU: steadier than wall time on a shared box (a killed one stops counting).
        "replica_cpu_s": round(cpu1 - cpu0, 1),
        "client_cpu_s": round(client1 - client0, 2),
        "pairs_per_s": round(stats.ok / wall, 2),
        "completion_tokens": stats.completion_tokens,
        "client_failed_attempts": sum(r.failures for r in stats.replicas),
        "hedges": sum(r.hedges for r in stats.replicas),
        "stopped_reason": stats.stopped_reason,
        "requests_sent": sum(r.requests for r in stats.replicas),
        "output_dir": str(out),
    }
    res.update(counter_deltas(before, after))
    return res


def counter_deltas(before: list[dict[str, float]], after: list[dict[str, float]]) -> dict:
    """Prefix-cache hit rate over all replicas and each replica's share of generated tokens, during one arm."""
    d = [{k: a[k] - b.get(k, 0.0) for k in a} for a, b in zip(after, before)]
    hits, queries = sum(x["hits"] for x in d), sum(x["queries"] for x in d)
    generated = sum(x["generated"] for x in d)
    return {
        "prefix_cache_hit_rate": round(hits / queries, 3) if queries else None,
        "generated_share": [round(x["generated"] / generated, 2) if generated else 0.0 for x in d],
    }


def arm_orders(arms: list[str], repeats: int) -> list[list[str]]:
    """Repeat r runs the arms rotated by r, so drift of a shared machine falls on each arm in turn."""
    return [arms[r % len(arms) :] + arms[: r % len(arms)] for r in range(repeats)]


# --- scenarios ----------------------------------------------------------------------------


async def scenario_prefix(args, replicas: RealReplicas, router_bin: str, tmp: Path) -> list[dict]:
    gen = dict(samples=args.samples, max_tokens=args.max_tokens, temperature=0.8)
    arms = ["fleetgen"] + (["fleetgen no-hedge"] if args.no_hedge_arm else []) + [f"router {p}" for p in args.policies]
    if args.warmup:  # untimed: fresh replicas pay for their first full batches, which no arm should carry
        prompts = write_prompts(
            tmp / "prefix-warm.jsonl", context_prompts(min(args.prompts, 40), args.words, 7, "warm")
        )
        warm = await one_arm(
            "warm-up",
            replicas,
            prompts,
            tmp,
            router=None,
            concurrency=args.concurrency,
            gen={**gen, "prefix_affinity": False},
        )
        print(_line("prefix", warm), flush=True)
    rows = []
    for r, order in enumerate(arm_orders(arms, args.repeats)):
        for arm in order:
            tag = f"r{r}-{arm.replace(' ', '_')}"  # contexts of its own: no arm hits another arm's blocks
            prompts = write_prompts(
                tmp / f"prefix-{tag}.jsonl", context_prompts(args.prompts, args.words, zlib.crc32(tag.encode()), tag)
            )
            reset = await replicas.reset_prefix_cache()
            res = await _arm(arm, replicas, prompts, tmp, router_bin, args.concurrency, gen)
            res.update(repeat=r, cache_reset=reset)
            rows.append(res)
            print(_line("prefix", res), flush=True)
    return rows


async def scenario_shared(args, replicas: RealReplicas, router_bin: str, tmp: Path) -> list[dict]:
    gen = dict(samples=1, max_tokens=args.shared_max_tokens, temperature=0.8)
    arms = ["fleetgen", "fleetgen pins-only"] + [f"router {p}" for p in args.shared_policies]
    if args.warmup:
        prompts = write_prompts(tmp / "shared-warm.jsonl", shared_prompts(40, 2, args.shared_tools, 11, "swarm"))
        print(
            _line(
                "shared",
                await one_arm("warm-up", replicas, prompts, tmp, router=None, concurrency=args.concurrency, gen=gen),
            ),
            flush=True,
        )
    rows = []
    for r, order in enumerate(arm_orders(arms, args.repeats)):
        for arm in order:
            tag = f"s{r}-{arm.replace(' ', '_')}"  # system prompts of its own: no arm hits another arm's blocks
            prompts = write_prompts(
                tmp / f"shared-{tag}.jsonl",
                shared_prompts(
                    args.shared_prompts, args.shared_systems, args.shared_tools, zlib.crc32(tag.encode()), tag
                ),
            )
            reset = await replicas.reset_prefix_cache()
            res = await _arm(arm, replicas, prompts, tmp, router_bin, args.concurrency, gen)
            res.update(repeat=r, cache_reset=reset)
            rows.append(res)
            print(_line("shared", res), flush=True)
    return rows


async def scenario_unequal(args, router_bin: str, tmp: Path) -> list[dict]:
    replicas = StandinReplicas(args.unequal_delays, max_concurrent=16)
    try:
        await wait_healthy(replicas.endpoints)
        prompts = write_prompts(tmp / "unequal.jsonl", short_prompts(args.unequal_prompts, "u"))
        gen = dict(max_tokens=16, temperature=0.0)
        arms = ["fleetgen"] + [f"router {p}" for p in args.unequal_policies]
        rows = []
        for r, order in enumerate(arm_orders(arms, args.repeats)):
            for arm in order:
                res = await _arm(arm, replicas, prompts, tmp, router_bin, 16, gen)
                res["repeat"] = r
                rows.append(res)
                print(_line("unequal", res), flush=True)
        return rows
    finally:
        replicas.stop()


async def scenario_kill(
    args, replicas: RealReplicas | StandinReplicas, router_bin: str, tmp: Path, restore_at_end: bool
) -> list[dict]:
    gen = dict(samples=1, max_tokens=args.kill_max_tokens, temperature=0.8, give_up_after_s=120)
    arms = ["fleetgen"] + [f"router {p}" for p in args.kill_policies]
    if args.warmup and isinstance(replicas, RealReplicas):  # untimed: the first arm must not pay for cold replicas
        prompts = write_prompts(tmp / "kill-warm.jsonl", short_prompts(args.kill_prompts, "kill-warm"))
        warm = await one_arm("warm-up", replicas, prompts, tmp, router=None, concurrency=args.concurrency, gen=gen)
        print(_line("kill", warm), flush=True)
    rows = []
    dead = False
    for r, order in enumerate(arm_orders(arms, args.kill_repeats)):
        for arm in order:
            if dead:  # the previous arm's victim comes back on its own port before this arm starts
                rows[-1]["restart_s"] = round(await replicas.restore(1), 1)
                dead = False
            tag = f"k{r}-{arm.replace(' ', '_')}"
            ids = [f"{tag}-{i}" for i in range(args.kill_prompts)]
            prompts = write_prompts(tmp / f"kill-{tag}.jsonl", short_prompts(args.kill_prompts, tag))
            killed: dict = {}

            def kill_once(s: Stats, total: int = args.kill_prompts, killed: dict = killed) -> None:
                if not killed and s.done >= args.kill_at * total:
                    replicas.kill(1)
                    killed.update(at_done=s.done, at=time.monotonic())

            try:
                res = await _arm(arm, replicas, prompts, tmp, router_bin, args.concurrency, gen, on_progress=kill_once)
                res["finished"] = res["stopped_reason"] is None and res["ok"] + res["errors"] == args.kill_prompts
            except Exception as e:  # a run that dies is an outcome to count, not a crash of the bench
                res = {"arm": arm, "finished": False, "crash": f"{type(e).__name__}: {e}", "output_dir": None}
            a = audit(Path(res["output_dir"]), ids, 1) if res.get("output_dir") else None
            res.pop("generated_share", None)  # the victim's counters die with it, and its cache
            res.pop("prefix_cache_hit_rate", None)
            res.pop("replica_cpu_s", None)
            res.update(
                repeat=r,
                killed_at_rows=killed.get("at_done"),
                replica=replicas.kind,
                audit=asdict_audit(a) if a else None,
            )
            if not killed:
                res["note"] = "the run ended before the kill point"
            dead = bool(killed)
            rows.append(res)
            print(_line("kill", res), flush=True)
    if dead and restore_at_end:
        await replicas.restore(1)
    return rows


async def _arm(arm, replicas, prompts, tmp, router_bin, concurrency, gen, on_progress=None) -> dict:
    if arm.startswith("fleetgen"):
        gen = {**gen, "hedge": False} if arm == "fleetgen no-hedge" else gen
        gen = {**gen, "prefix_routing": False} if arm == "fleetgen pins-only" else gen
        return await one_arm(
            arm, replicas, prompts, tmp, router=None, concurrency=concurrency, gen=gen, on_progress=on_progress
        )
    async with Router(router_bin, replicas.endpoints, arm.split()[1], tmp / "router.log") as router:
        return await one_arm(
            arm, replicas, prompts, tmp, router=router, concurrency=concurrency, gen=gen, on_progress=on_progress
        )


def _line(scenario: str, res: dict) -> str:
    keep = (
        "arm",
        "repeat",
        "wall_s",
        "replica_cpu_s",
        "hedges",
        "ok",
        "errors",
        "prefix_cache_hit_rate",
        "generated_share",
        "client_failed_attempts",
        "finished",
        "audit",
        "crash",
    )
    return f"{scenario}: " + json.dumps({k: res[k] for k in keep if k in res})


# --- summary ------------------------------------------------------------------------------


def medians(rows: list[dict]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for arm in dict.fromkeys(r["arm"] for r in rows):
        mine = [r for r in rows if r["arm"] == arm]
        out[arm] = {
            "wall_s": statistics.median(r["wall_s"] for r in mine),
            "walls": [r["wall_s"] for r in mine],
            "replica_cpu_s": statistics.median(r["replica_cpu_s"] for r in mine),
            "hedges": statistics.median(r.get("hedges", 0) for r in mine),
        }
        rates = [r["prefix_cache_hit_rate"] for r in mine if r.get("prefix_cache_hit_rate") is not None]
        if rates:
            out[arm]["prefix_cache_hit_rate"] = round(statistics.median(rates), 3)
        out[arm]["generated_share"] = mine[-1].get("generated_share")
    best = min((a for a in out if a.startswith("router")), key=lambda a: out[a]["wall_s"], default=None)
    for m in out.values():
        m["router_best_over_this"] = round(out[best]["wall_s"] / m["wall_s"], 2) if best else None
        m["router_best_cpu_over_this"] = (
            round(out[best]["replica_cpu_s"] / m["replica_cpu_s"], 2) if best and m["replica_cpu_s"] else None
        )
    return out


def print_speed(title: str, med: dict[str, dict]) -> None:
    t = Table(title=title)
    for col in (
        "arm",
        "wall s (median)",
        "runs",
        "replica CPU s",
        "hedged requests",
        "prefix-cache hit rate",
        "tokens per replica (last run)",
        "router's best wall / this",
        "router's best CPU / this",
    ):
        t.add_column(col)
    for arm, m in med.items():
        hit = m.get("prefix_cache_hit_rate")
        t.add_row(
            arm,
            f"{m['wall_s']:.1f}",
            " / ".join(f"{w:.1f}" for w in m["walls"]),
            f"{m['replica_cpu_s']:.1f}",
            f"{m['hedges']:.0f}",
            "" if hit is None else f"{hit:.2f}",
            " / ".join(f"{x:.2f}" for x in m.get("generated_share") or []),
            f"{m['router_best_over_this']:.2f}x" if m["router_best_over_this"] else "",
            f"{m['router_best_cpu_over_this']:.2f}x" if m["router_best_cpu_over_this"] else "",
        )
    Console(width=160).print(t)


def print_kill(rows: list[dict]) -> None:
    t = Table(title="one replica (of 2) killed -9 mid-run")
    for col in (
        "arm",
        "repeat",
        "finished",
        "rows written",
        "row errors",
        "lost",
        "duplicated",
        "corrupt",
        "failed attempts seen by the client",
        "wall s",
    ):
        t.add_column(col)
    for r in rows:
        a = r.get("audit") or {}
        t.add_row(
            r["arm"],
            str(r["repeat"]),
            str(r.get("finished")),
            str(a.get("results", "")),
            str(a.get("errors", "")),
            str(a.get("lost", "")),
            str(a.get("duplicated", "")),
            str(a.get("corrupt", "")),
            str(r.get("client_failed_attempts", "")),
            str(r.get("wall_s", "")),
        )
    Console(width=160).print(t)


# --- main ---------------------------------------------------------------------------------


async def main_async(args: argparse.Namespace) -> dict:
    router_bin = find_router(args.router_bin)
    python = Path(router_bin).with_name("python")
    version = subprocess.run(
        [
            str(python if python.exists() else sys.executable),
            "-c",
            "import importlib.metadata as m; print(m.version('vllm-router'))",
        ],
        capture_output=True,
        text=True,
    ).stdout.strip()
    tmp = Path(tempfile.mkdtemp(prefix="router-race-"))
    result: dict = {
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "load_avg_at_start": os.getloadavg(),
        },
        "router": {"package": "vllm-router", "version": version or f"(not in this venv; pinned {ROUTER_VERSION})"},
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
    }
    scenarios = args.scenarios.split(",")
    real: RealReplicas | None = None
    own_fleet = None
    try:
        if {"prefix", "kill", "shared"} & set(scenarios) and not (args.kill_on == "standin" and scenarios == ["kill"]):
            if args.fleet:
                real = RealReplicas(Path(args.fleet))
            else:
                own_fleet = tmp / "fleet"
                t0 = time.monotonic()
                print("starting 2 vLLM-CPU replicas (SmolLM2, --enforce-eager) ...", flush=True)
                # The dev mode serves /reset_prefix_cache; start_fleet runs its own event loop, hence the thread.
                small_kv = (
                    {"engine_args": ["--num-gpu-blocks-override", str(args.kv_blocks), "--block-size", "32"]}
                    if args.kv_blocks
                    else {}
                )
                await asyncio.to_thread(start_fleet, own_fleet, 2, env={"VLLM_SERVER_DEV_MODE": "1"}, **small_kv)
                result["fleet_start_s"] = round(time.monotonic() - t0, 1)
                real = RealReplicas(own_fleet)
            result["fleet"] = {
                "replicas": len(real.endpoints),
                "model": real.model,
                "max_running_requests": real.state.max_running_requests,
            }
        if "prefix" in scenarios:
            assert real is not None
            rows = await scenario_prefix(args, real, router_bin, tmp)
            result["prefix"] = {"runs": rows, "medians": medians(rows)}
        if "shared" in scenarios:
            assert real is not None
            rows = await scenario_shared(args, real, router_bin, tmp)
            result["shared"] = {"runs": rows, "medians": medians(rows)}
        if "unequal" in scenarios:
            rows = await scenario_unequal(args, router_bin, tmp)
            result["unequal"] = {"runs": rows, "medians": medians(rows)}
        if "kill" in scenarios:
            if args.kill_on == "standin":
                stand = StandinReplicas([0.02, 0.02], max_concurrent=16)
                try:
                    await wait_healthy(stand.endpoints)
                    result["kill"] = {"runs": await scenario_kill(args, stand, router_bin, tmp, False)}
                finally:
                    stand.stop()
            else:
                assert real is not None
                result["kill"] = {"runs": await scenario_kill(args, real, router_bin, tmp, own_fleet is None)}
    finally:
        if own_fleet is not None:
            down(own_fleet, grace_s=10)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", default="prefix,unequal,kill", help="comma-separated: prefix, unequal, kill")
    ap.add_argument("--repeats", type=int, default=2, help="repeats of each arm (prefix, unequal)")
    ap.add_argument(
        "--fleet", default=None, help="state dir of a running fleet of 2 to reuse (yours alone); default: start one"
    )
    ap.add_argument(
        "--router-bin", default=None, help="vllm-router executable; default: beside this python, or on PATH"
    )
    ap.add_argument("--concurrency", type=int, default=64, help="requests in flight per replica (router: x replicas)")
    ap.add_argument("--prompts", type=int, default=40, help="prefix: prompts, each with its own context")
    ap.add_argument("--samples", type=int, default=3, help="prefix: samples per prompt")
    ap.add_argument("--words", type=int, default=500, help="prefix: words of each prompt's context")
    ap.add_argument("--max-tokens", type=int, default=32, help="prefix: token budget per answer")
    ap.add_argument(
        "--warmup",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="prefix, kill: one untimed run on the replicas before the arms",
    )
    ap.add_argument(
        "--no-hedge-arm",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="prefix: also run fleetgen with hedging off (shows what the tail's hedges cost here)",
    )
    ap.add_argument(
        "--policies",
        default="cache_aware,round_robin,power_of_two",
        type=lambda s: s.split(","),
        help="prefix: router policies",
    )
    ap.add_argument("--shared-prompts", type=int, default=360, help="shared: prompts (one sample each)")
    ap.add_argument("--shared-systems", type=int, default=12, help="shared: distinct system prompts among them")
    ap.add_argument("--shared-tools", type=int, default=6, help="shared: tool schemas in each system prompt")
    ap.add_argument("--shared-max-tokens", type=int, default=16)
    ap.add_argument(
        "--shared-policies", default="cache_aware", type=lambda s: s.split(","), help="shared: router policies"
    )
    ap.add_argument(
        "--kv-blocks",
        type=int,
        default=None,
        help="KV cache blocks (of 32 tokens) per replica of the fleet started here; default: the 1 GB cache",
    )
    ap.add_argument("--unequal-prompts", type=int, default=600)
    ap.add_argument(
        "--unequal-delays",
        default="0.01,0.04",
        type=lambda s: [float(x) for x in s.split(",")],
        help="unequal: seconds per token of each stand-in",
    )
    ap.add_argument("--unequal-policies", default="power_of_two,cache_aware,round_robin", type=lambda s: s.split(","))
    ap.add_argument("--kill-on", choices=("real", "standin"), default="real", help="kill: a real replica or a stand-in")
    ap.add_argument("--kill-prompts", type=int, default=150)
    ap.add_argument("--kill-max-tokens", type=int, default=48)
    ap.add_argument(
        "--kill-at", type=float, default=0.3, help="kill: fraction of rows written when replica 1 is killed"
    )
    ap.add_argument("--kill-policies", default="cache_aware,power_of_two", type=lambda s: s.split(","))
    ap.add_argument("--kill-repeats", type=int, default=1)
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/router_race.json")
    args = ap.parse_args()
    result = asyncio.run(main_async(args))
    for name, title in (
        (
            "prefix",
            f"prefix-heavy: {args.prompts} prompts x {args.samples} samples, ~{args.words}-word "
            "context each, 2 vLLM-CPU replicas",
        ),
        (
            "shared",
            f"shared system prompts: {args.shared_prompts} prompts over {args.shared_systems} "
            f"system prompts of {args.shared_tools} tool schemas, 1 sample, 2 vLLM-CPU replicas",
        ),
        (
            "unequal",
            f"unequal: {args.unequal_prompts} prompts, 2 stand-ins at "
            f"{' vs '.join(f'{d * 1000:.0f}' for d in args.unequal_delays)} ms/token",
        ),
    ):
        if name in result:
            print_speed(title, result[name]["medians"])
            m = result[name]["medians"]
            best = min((a for a in m if a.startswith("router")), key=lambda a: m[a]["wall_s"])
            for arm in (a for a in m if a.startswith("fleetgen")):
                result[name][f"{arm} over router best"] = ratio = m[arm]["router_best_over_this"]
                print(f"{name}: {arm} is {ratio:.2f}x the router's best ({best}) by median wall time")
    if "kill" in result:
        print_kill(result["kill"]["runs"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, default=str))
    print(f"written {args.out}")


if __name__ == "__main__":
    main()
