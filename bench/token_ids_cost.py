"""What carrying token ids costs: the client (CPU per request) and the journal (bytes, write, resume), in one run.

Client arms, each a fresh child process pinned to one core against the NULL SERVER
(bench/null_server.py, answers of --answer-tokens words, ids as vLLM returns them when asked) on
the other core, alternating, --repeats times:
  base     the code before token ids (a source tree given by --base-src, e.g. `git archive main src`)
  ids-off  this tree with token_ids=False (nothing asked, nothing recorded)
  ids-on   this tree with token_ids=True (ids asked, read, packed into every row)
Journal arms, in this process on the same rows: a record without ids vs the same record with the
ids of one turn packed in; rows written through Journal.commit (group commit + fsync), then the
done-set rebuilt from the file as a resume does (load_done).

Usage: PYTHONPATH=src .venv/bin/python bench/token_ids_cost.py --base-src /tmp/fleetgen-base/src \
           [--rows 4000] [--answer-tokens 600] [--prompt-tokens 300] [--journal-rows 100000] [--repeats 3]
       PYTHONPATH=src .venv/bin/python bench/token_ids_cost.py --fleet STATE_DIR [--fleet-rows 120]
The second form measures results bytes per row on a real fleet: the same prompts (single- and
three-turn, seeded) generated with token ids on and off.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from client_overhead import _free_port, _get, _prompts  # noqa: E402


def child(prompts: Path, endpoints: list[str], window: int, max_tokens: int, ids: str) -> None:
    import aiohttp  # noqa: F401  imports are not the client's work

    from fleetgen.generate import GenerateConfig, generate

    kw = {} if ids == "default" else {"token_ids": ids == "on"}
    with tempfile.TemporaryDirectory() as d:
        cfg = GenerateConfig(
            prompts=prompts,
            output_dir=Path(d),
            endpoints=endpoints,
            model="null",
            max_tokens=max_tokens,
            concurrency=window,
            **kw,
        )
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.monotonic()
        stats = generate(cfg, handle_signals=False)
        wall = time.monotonic() - t0
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        size = (Path(d) / "results.jsonl").stat().st_size
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    print(
        json.dumps(
            {
                "completed": stats.ok,
                "wall_s": wall,
                "cpu_s": cpu,
                "bytes_per_row": size / max(1, stats.ok),
                "peak_rss_mib": r1.ru_maxrss / 1024,
            }
        )
    )


ARMS = {"base": "default", "ids-off": "off", "ids-on": "on"}


def run_client_arm(arm: str, src: Path, prompts: Path, ports: list[int], a: argparse.Namespace) -> dict:
    endpoints = [f"http://127.0.0.1:{p}" for p in ports]
    env = {**os.environ, "PYTHONPATH": str(src)}
    cmd = [
        "taskset",
        "-c",
        str(a.client_core),
        sys.executable,
        __file__,
        "--child",
        ARMS[arm],
        "--prompts",
        str(prompts),
        "--window",
        str(a.window),
        "--max-tokens",
        str(a.answer_tokens),
        "--endpoints",
        *endpoints,
    ]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout.strip().splitlines()[-1]
    res = json.loads(out)
    res["req_per_s"] = res["completed"] / res["wall_s"]
    res["cpu_us_per_req"] = 1e6 * res["cpu_s"] / res["completed"]
    return res


def journal_arm(with_ids: bool, n: int, answer_tokens: int, prompt_tokens: int, workdir: Path) -> dict:
    from fleetgen.generate.journal.directory import Journal
    from fleetgen.generate.journal.loaddone import load_done
    from fleetgen.generate.journal.outcomes import Batch, Completed, record
    from fleetgen.generate.observe.stats import Stats
    from fleetgen.rows.token_ids import TurnIds, TurnIdsLog

    answer = "".join(f" word{i % 50}" for i in range(answer_tokens - 1)).strip()
    ids = [(i * 7919) % (16000 if i % 5 else 150000) for i in range(answer_tokens + prompt_tokens)]
    turn = TurnIds(ids[answer_tokens:], ids[:answer_tokens])
    outdir = Path(tempfile.mkdtemp(dir=workdir))
    journal, done = Journal.open(outdir, retry_errors=False)
    stats = Stats()
    pack_s = 0.0
    t0 = time.monotonic()
    for start in range(0, n, 512):
        b = Batch()
        for i in range(start, min(n, start + 512)):
            rec = {
                "messages": [
                    {"role": "user", "content": f"Write about topic {i}."},
                    {"role": "assistant", "content": answer},
                ],
                "tools": None,
                "meta": {"domain": "chat"},
                "finish_reason": ["stop"],
                "truncated": False,
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": answer_tokens},
                "replica": "http://127.0.0.1:30000",
                "model": "null",
                "sampling": {"max_tokens": 2048, "temperature": 0.7, "top_p": 1.0, "seed": None},
                "timing": {"started_at": 1.7e9 + i, "latency_s": 21.5},
            }
            if with_ids:
                p0 = time.monotonic()
                log = TurnIdsLog()
                log.add(turn)
                rec["token_ids"] = log.record()
                pack_s += time.monotonic() - p0
            record(Completed(f"p{i}", 0, rec, False, prompt_tokens, answer_tokens), b, done, stats)
        journal.commit(b.results, b.errors)
    write_s = time.monotonic() - t0
    journal.close()
    size = (outdir / "results.jsonl").stat().st_size
    t1 = time.monotonic()
    again = load_done(outdir)
    resume_s = time.monotonic() - t1
    assert len(again) == n
    for f in outdir.iterdir():
        f.unlink()
    outdir.rmdir()
    return {
        "rows": n,
        "write_us_per_row": 1e6 * write_s / n,
        "pack_us_per_row": 1e6 * pack_s / n,
        "bytes_per_row": size / n,
        "resume_s": resume_s,
    }


def fleet_sizes(state: Path, n: int, workdir: Path) -> None:
    """Bytes per result row with and without ids on real replicas (same prompts, same seed)."""
    from fleetgen.generate import GenerateConfig, generate

    with tempfile.TemporaryDirectory(dir=workdir) as d:
        prompts = Path(d) / "p.jsonl"
        with open(prompts, "wb") as f:
            for i in range(n):
                turns = [{"role": "user", "content": f"Tell me about topic number {i}."}]
                if i % 3 == 0:  # a third are three-turn conversations
                    for q in ("Say more.", "Summarize it."):
                        turns += [{"role": "assistant", "content": "old"}, {"role": "user", "content": q}]
                f.write(orjson.dumps({"id": f"p{i}", "messages": turns}) + b"\n")
        sizes = {}
        for on in (False, True):
            out = Path(d) / f"ids-{on}"
            generate(
                GenerateConfig(
                    prompts=prompts,
                    output_dir=out,
                    fleet_state=state,
                    max_tokens=128,
                    temperature=0.8,
                    seed=0,
                    token_ids=on,
                ),
                handle_signals=False,
            )
            rows = [line for line in open(out / "results.jsonl", "rb")]
            sizes[on] = sum(map(len, rows)) / len(rows)
    print(
        f"real fleet, {n} rows (a third three-turn), max_tokens 128: results bytes/row without ids "
        f"{sizes[False]:.0f}, with ids {sizes[True]:.0f} ({sizes[True] / sizes[False]:.2f}x)"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--child", choices=["default", "on", "off"])
    ap.add_argument("--prompts", type=Path)
    ap.add_argument("--endpoints", nargs="+")
    ap.add_argument("--max-tokens", type=int, default=600)
    ap.add_argument("--base-src", type=Path, help="src/ of the code before token ids (git archive main src)")
    ap.add_argument("--rows", type=int, default=4000)
    ap.add_argument("--replicas", type=int, default=8)
    ap.add_argument("--window", type=int, default=64)
    ap.add_argument("--answer-tokens", type=int, default=600)
    ap.add_argument("--prompt-tokens", type=int, default=300)
    ap.add_argument("--journal-rows", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--client-core", type=int, default=0)
    ap.add_argument("--server-core", type=int, default=1)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp"))
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/token_ids_cost.json")
    ap.add_argument("--fleet", type=Path, help="measure bytes per row on this fleet instead")
    ap.add_argument("--fleet-rows", type=int, default=120)
    a = ap.parse_args()
    if a.child:
        return child(a.prompts, a.endpoints, a.window, a.max_tokens, a.child)
    if a.fleet:
        return fleet_sizes(a.fleet, a.fleet_rows, a.workdir)

    srcs = {"base": a.base_src, "ids-off": ROOT / "src", "ids-on": ROOT / "src"}
    if not a.base_src:
        srcs.pop("base")
    ports = [_free_port() for _ in range(a.replicas)]
    server = subprocess.Popen(
        [
            "taskset",
            "-c",
            str(a.server_core),
            sys.executable,
            str(ROOT / "bench/null_server.py"),
            "--ports",
            *map(str, ports),
            "--answer-tokens",
            str(a.answer_tokens),
            "--prompt-tokens",
            str(a.prompt_tokens),
        ]
    )
    client: dict[str, list[dict]] = {arm: [] for arm in srcs}
    journal: dict[str, list[dict]] = {"without ids": [], "with ids": []}
    try:
        for _ in range(100):
            try:
                _get(f"http://127.0.0.1:{ports[-1]}/health")
                break
            except OSError:
                time.sleep(0.1)
        with tempfile.TemporaryDirectory(dir=a.workdir) as d:
            prompts = Path(d) / "p.jsonl"
            _prompts(prompts, a.rows)
            arms = list(srcs)
            for i in range(a.repeats):
                for arm in arms if i % 2 == 0 else arms[::-1]:
                    client[arm].append(run_client_arm(arm, srcs[arm], prompts, ports, a))
                    print(
                        f"repeat {i + 1} {arm}: {client[arm][-1]['cpu_us_per_req']:.0f} us CPU/req, "
                        f"{client[arm][-1]['req_per_s']:.0f} req/s",
                        file=sys.stderr,
                    )
                for name in ["without ids", "with ids"] if i % 2 == 0 else ["with ids", "without ids"]:
                    journal[name].append(
                        journal_arm(name == "with ids", a.journal_rows, a.answer_tokens, a.prompt_tokens, a.workdir)
                    )
    finally:
        server.kill()
        server.wait()

    med = lambda runs: {k: statistics.median(r[k] for r in runs) for k in runs[0]}  # noqa: E731
    c = {arm: med(rs) for arm, rs in client.items()}
    j = {arm: med(rs) for arm, rs in journal.items()}
    print(
        f"\nclient pinned to core {a.client_core}, null server on core {a.server_core}; "
        f"{a.rows} rows, {a.replicas}x{a.window} in flight, answers of {a.answer_tokens} tokens, prompts of "
        f"{a.prompt_tokens}; medians of {a.repeats}"
    )
    ref = "base" if "base" in c else "ids-off"
    print(f"{'client':28}" + "".join(f"{arm:>12}" for arm in c) + f"{'ids-on/' + ref:>16}")
    for label, key, fmt in [
        ("CPU us per request", "cpu_us_per_req", "{:.0f}"),
        ("req/s", "req_per_s", "{:.0f}"),
        ("results bytes per row", "bytes_per_row", "{:.0f}"),
        ("peak RSS MiB", "peak_rss_mib", "{:.0f}"),
    ]:
        print(
            f"{label:28}"
            + "".join(f"{fmt.format(c[arm][key]):>12}" for arm in c)
            + f"{c['ids-on'][key] / c[ref][key]:>16.2f}"
        )
    print(f"\n{'journal (' + str(a.journal_rows) + ' rows)':28}{'without ids':>12}{'with ids':>12}{'with/without':>16}")
    for label, key, fmt in [
        ("bytes per row", "bytes_per_row", "{:.0f}"),
        ("write us per row", "write_us_per_row", "{:.1f}"),
        ("  of which packing ids", "pack_us_per_row", "{:.1f}"),
        ("resume (load_done) s", "resume_s", "{:.2f}"),
    ]:
        w, wo = j["with ids"][key], j["without ids"][key]
        ratio = f"{w / wo:>16.2f}" if wo else f"{'-':>16}"
        print(f"{label:28}{fmt.format(wo):>12}{fmt.format(w):>12}{ratio}")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(
        json.dumps(
            {
                "machine": (
                    f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
                    f"load {os.getloadavg()[0]:.1f}"
                ),
                "rows": a.rows,
                "replicas": a.replicas,
                "window": a.window,
                "answer_tokens": a.answer_tokens,
                "prompt_tokens": a.prompt_tokens,
                "journal_rows": a.journal_rows,
                "repeats": a.repeats,
                "client_median": c,
                "journal_median": j,
                "client_runs": client,
                "journal_runs": journal,
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
