"""Journal and resume at scale, and prompt streaming with bounded memory.

1. write: N result rows (realistic size) through the writer's path (outcomes.record + Journal.commit,
   one write and one fsync per batch of `--batch`), rows/s;
2. resume: a child process runs the real `generate()` on the finished directory against the NULL
   SERVER (bench/null_server.py): fingerprint, torn-tail repair, done-set scan and the skip pass over
   every prompt; wall and CPU time, the fingerprint and Journal.open shares, and the child's peak RSS.
   Arms on the same file, alternating `--repeats` times (`--arms` picks them), complete.json removed
   before each but "mark". "before" runs the source tree given by `--before-src` (e.g. `git archive
   <commit> src | tar -x -C /tmp/before`) with the checkpoint removed (the full pass); "before-cut" the
   same tree with the checkpoint cut back to its second-to-last frame, or with `--cut-rows N` to the
   last one leaving N rows past its watermark (an interrupted run: the rows past the watermark are
   read, each one's id looked up among those claimed before it);
   "after" the code as it is with its checkpoint, claims and done-set snapshots and prompt stamp
   removed (the full pass, as on the first resume after an upgrade; it writes them anew); "cut" the code as it
   is with the same cut checkpoint and the done-set snapshot taken at `--snapshot-at` (0.98) of the
   write restored (what a killed run leaves: its last snapshot predates its end, so the index frames
   after it are read); "mark" the code as it is, finding the complete.json the run before it left.
   `process_s` also counts the interpreter's start and imports, i.e. what a user waits for;
3. stream: M prompt rows generated on the fly into /tmp (deleted afterwards); a child iterates the
   runner's own work iterator (read, normalize, duplicate-id check, done-set check) over all of
   them; rows/s and peak RSS.
4. fence (`--fence-commits K`): the writer's lease check (generate/journal/lease.py) before each commit. Arms
   alternate `--repeats` times, each K commits of `--fence-batch` rows into a fresh journal: "before"
   without a lease (as before leases existed), "after" with one; per-commit wall (median of the
   repeats) and their ratio, and the check alone timed over 100,000 calls.

Usage: .venv/bin/python bench/journal_bench.py [--rows 1000000] [--repeats 2] [--before-src DIR/src] [--stream-rows
10000000]
       [--doneset-rows 10000000 --samples 1] [--out bench/results/journal_bench.json]
       [--keep DIR]  (write the rows once into DIR and keep it;
       later runs with the same DIR and --rows run the arms on it)
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
ANSWER = ("Sure. Here is a careful, step by step answer that a 27B model might give. " * 20).strip()  # ~1.5 KB


def _prompt(i: int) -> dict:
    return {
        "id": f"row-{i:09d}",
        "messages": [{"role": "user", "content": f"Explain topic number {i} in two sentences."}],
        "meta": {"source": "bench", "domain": "general"},
    }


def write_prompts(path: Path, n: int) -> None:
    with open(path, "wb", buffering=1 << 20) as f:
        for start in range(0, n, 10000):
            f.write(b"".join(orjson.dumps(_prompt(i)) + b"\n" for i in range(start, min(n, start + 10000))))


def bench_write(outdir: Path, n: int, batch: int, snapshot_at: float = 0.0) -> dict:
    from fleetgen.generate.journal.directory import Journal
    from fleetgen.generate.journal.outcomes import Batch, Completed, record
    from fleetgen.generate.observe.stats import Stats

    journal, done = Journal.open(outdir, retry_errors=False)
    stats = Stats()
    t0 = time.monotonic()
    commits = 0
    for start in range(0, n, batch):
        b = Batch()
        for i in range(start, min(n, start + batch)):
            p = _prompt(i)
            rec = {
                "messages": [*p["messages"], {"role": "assistant", "content": ANSWER}],
                "tools": None,
                "meta": p["meta"],
                "finish_reason": ["stop"],
                "truncated": False,
                "usage": {"prompt_tokens": 14, "completion_tokens": 330},
                "replica": "http://127.0.0.1:30000",
                "model": "null",
                "sampling": {"max_tokens": 2048, "temperature": 0.7, "top_p": 1.0, "seed": None},
                "timing": {"started_at": 1.7e9 + i, "latency_s": 21.5},
            }
            record(Completed(p["id"], 0, rec, False, 14, 330), b, done, stats)
        journal.commit(b.results, b.errors)
        commits += 1
        if snapshot_at and start < snapshot_at * n <= start + batch and hasattr(journal, "save_done"):
            # The last done-set snapshot a killed run left (the journal writes one every 30 s or so):
            # kept aside for the "cut" arm, whose resume then reads the index frames after it.
            journal.save_done()
            shutil.copy(outdir / "results.done", outdir.parent / "results.done.early")
    wall = time.monotonic() - t0
    journal.close()
    size = (outdir / "results.jsonl").stat().st_size
    return {
        "rows": n,
        "wall_s": wall,
        "rows_per_s": n / wall,
        "commits": commits,
        "bytes": size,
        "bytes_per_row": size / n,
    }


def bench_fence(work: Path, commits: int, batch: int, repeats: int) -> dict:
    """Per-commit wall with and without the lease's fence check, alternating; and the check alone."""
    from fleetgen.generate.journal.directory import Journal
    from fleetgen.generate.journal.lease import Lease
    from fleetgen.generate.journal.linekey import dumps_line

    line = dumps_line({"id": "row", "sample": 0, "messages": [{"role": "assistant", "content": ANSWER}]})
    lines = [line] * batch
    per_commit: dict[str, list[float]] = {"before": [], "after": []}
    for k in range(repeats):
        for arm in per_commit:
            d = work / f"fence-{arm}-{k}"
            lease = Lease.acquire(d) if arm == "after" else None
            journal, _ = Journal.open(d, retry_errors=False, lease=lease)
            t0 = time.perf_counter()
            for _ in range(commits):
                journal.commit(lines, [])
            per_commit[arm].append((time.perf_counter() - t0) / commits * 1e6)
            journal.close()
            if lease is not None:
                lease.release()
            shutil.rmtree(d)
    lease = Lease.acquire(work / "fence-check")
    t0 = time.perf_counter()
    for _ in range(100_000):
        lease.check()
    check_us = (time.perf_counter() - t0) / 100_000 * 1e6
    lease.release()
    shutil.rmtree(work / "fence-check")
    med = {arm: _median(v) for arm, v in per_commit.items()}
    return {
        "commits": commits,
        "batch_rows": batch,
        "repeats": repeats,
        "per_commit_us": per_commit,
        "median_per_commit_us": med,
        "after_over_before": med["after"] / med["before"],
        "check_us": check_us,
    }


def child_resume(prompts: Path, outdir: Path, endpoint: str, arm: str) -> None:
    import fleetgen.generate.journal.directory as journal_mod
    import fleetgen.generate.runner as runner_mod
    from fleetgen.generate import GenerateConfig, generate

    # "before" runs another source tree (--before-src, put first on the child's PYTHONPATH), unpatched.
    timings: dict[str, float] = {}

    def timed(name, fn):
        def wrapper(*a, **kw):
            t = time.monotonic()
            out = fn(*a, **kw)
            timings[name] = time.monotonic() - t
            return out

        return wrapper

    real_open = journal_mod.Journal.open.__func__
    journal_mod.Journal.open = classmethod(timed("journal_open_s", real_open))
    # The prompt file's fingerprint: hashed (older code), or read from the stamp beside the output.
    name = "stamped_fingerprint" if hasattr(runner_mod, "stamped_fingerprint") else "fingerprint"
    setattr(runner_mod, name, timed("fingerprint_s", getattr(runner_mod, name)))
    if hasattr(journal_mod.Journal, "save_done"):  # the done-set snapshot written at the run's end
        journal_mod.Journal.save_done = timed("snapshot_save_s", journal_mod.Journal.save_done)
        try:  # where the done set is read back (older code: directory.py itself)
            import fleetgen.generate.journal.loaddone as done_mod
        except ImportError:
            done_mod = journal_mod
        real_snap = done_mod._from_snapshot

        def from_snapshot(*a, **kw):
            out = real_snap(*a, **kw)
            timings["done_snapshot_used"] = out is not None
            if out is None:
                from fleetgen.generate.journal import donefile

                timings["done_snapshot_refused"] = donefile.last_refusal
            return out

        done_mod._from_snapshot = from_snapshot
    import fleetgen.generate.journal.checkpoint as watermark_mod

    if hasattr(watermark_mod, "claimsfile"):  # the sorted claims beside the checkpoint
        real_claims = watermark_mod.claimsfile.load

        def claims_load(*a, **kw):
            out = real_claims(*a, **kw)
            timings["claims_snapshot_used"] = out is not None
            return out

        watermark_mod.claimsfile.load = claims_load
    # The resume checkpoint's load (not in older code; named Progress before CheckpointProgress).
    progress_cls = getattr(runner_mod, "CheckpointProgress", None) or getattr(runner_mod, "Progress", None)
    if progress_cls is not None:
        real_progress = progress_cls.open.__func__
        progress_cls.open = classmethod(timed("checkpoint_open_s", real_progress))
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    cfg = GenerateConfig(prompts=prompts, output_dir=outdir, endpoints=[endpoint], model="null", max_tokens=2048)
    t0, c0 = time.monotonic(), time.process_time()
    stats = generate(cfg, handle_signals=False)
    wall, cpu = time.monotonic() - t0, time.process_time() - c0
    print(
        json.dumps(
            {
                "arm": arm,
                "wall_s": wall,
                "cpu_s": cpu,
                **timings,
                "resumed": stats.resumed,
                "ok": stats.ok,
                "rss_before_mib": base / 1024,
                "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "process_cpu_s": _own_cpu(),
            }
        )
    )


def _own_cpu() -> float:
    """CPU seconds of this whole process so far, interpreter start and imports included."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def child_stream(prompts: Path) -> None:
    from fleetgen.generate.observe.stats import Stats
    from fleetgen.generate.prompts.worklist import WorkList
    from fleetgen.rows.doneset import DoneSet

    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    work = WorkList(prompts, 1, DoneSet(), Stats())
    t0 = time.monotonic()
    n = 0
    for item, _sample in work:
        work.finished(item.id)  # what a finished sample does
        n += 1
    wall = time.monotonic() - t0
    print(
        json.dumps(
            {
                "rows": n,
                "wall_s": wall,
                "rows_per_s": n / wall,
                "rss_before_mib": base / 1024,
                "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            }
        )
    )


def _record_identity(prompts: Path, outdir: Path) -> None:
    """job.json as the runner writes it for this prompt file, model and sampling: the resume then matches."""
    from fleetgen.generate import GenerateConfig
    from fleetgen.generate.journal.identity import check_identity
    from fleetgen.generate.prompts.reader import fingerprint

    cfg = GenerateConfig(
        prompts=prompts, output_dir=outdir, endpoints=["http://127.0.0.1:1"], model="null", max_tokens=2048
    )
    fp, rows = fingerprint(prompts)
    outdir.mkdir(parents=True)
    check_identity(
        outdir,
        {"prompts": {"sha256": fp, "rows": rows}, "model": "null", "sampling": cfg.sampling.identity()},
        force=False,
    )


def write_tiny(outdir: Path, rows: int, samples: int) -> None:
    """`rows` minimal result lines (id and sample only) through Journal.commit, so the key index is the real one."""
    from fleetgen.generate.journal.directory import Journal

    journal, _ = Journal.open(outdir, retry_errors=False)
    keys = ((i // samples, i % samples) for i in range(rows))
    while True:
        batch = [b'{"id":"row-%09d","sample":%d}\n' % k for k in itertools.islice(keys, 8192)]
        if not batch:
            break
        journal.commit(batch, [])
    journal.close()


def child_doneset(outdir: Path) -> None:
    """Peak RSS and time of Journal.open (the key index read into the done set) on a directory of many rows."""
    from fleetgen.generate.journal.directory import Journal

    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0, c0 = time.monotonic(), _own_cpu()
    journal, done = Journal.open(outdir, retry_errors=False)
    wall, cpu = time.monotonic() - t0, _own_cpu() - c0
    journal.close()
    print(
        json.dumps(
            {
                "rows": len(done),
                "wall_s": wall,
                "cpu_s": cpu,
                "table_mib": done.nbytes / 2**20,
                "rss_before_mib": base / 1024,
                "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            }
        )
    )


def _child(*args: str, src: Path | None = None) -> dict:
    t0 = time.monotonic()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(src) if src else "", os.environ.get("PYTHONPATH", "")) if p),
    }
    out = subprocess.run(
        [sys.executable, __file__, "--child", *args], check=True, capture_output=True, text=True, env=env
    )
    return {**json.loads(out.stdout.strip().splitlines()[-1]), "process_s": time.monotonic() - t0}


def _cut_back(ckpt: Path, rows: int, past: int) -> tuple[bytes, int]:
    """The checkpoint's bytes up to its last frame that leaves at least `past` rows after its watermark
    (0: the frame before the last), and that frame's watermark line; back to the header if none."""
    from fleetgen.generate.journal import checkpoint as wm

    data = ckpt.read_bytes()
    pos, starts, lines = len(wm._MAGIC) + 32, [], []
    while pos < len(data):
        fields = wm._FRAME.unpack_from(data, pos)
        starts.append(pos)
        lines.append(fields[2])
        pos += wm._FRAME.size + wm._CRC.size + fields[1] * wm.CLAIM_DTYPE.itemsize
    keep = [i for i in range(len(lines) - 1) if rows - lines[i] + 1 >= past]
    if not keep:
        return data[: starts[0]] if starts else data, 1  # the header alone: a full pass
    return data[: starts[keep[-1] + 1]], lines[keep[-1]]


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--child", choices=["resume", "stream", "doneset"])
    ap.add_argument(
        "--before-src", type=Path, help="source tree of the code to compare against (e.g. an older commit's src/)"
    )
    ap.add_argument(
        "--doneset-rows", type=int, default=0, help="also measure Journal.open over this many minimal rows (peak RSS)"
    )
    ap.add_argument("--samples", type=int, default=1)
    ap.add_argument("--prompts", type=Path)
    ap.add_argument("--outdir", type=Path)
    ap.add_argument("--endpoint")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=2, help="resume runs per arm, alternating")
    ap.add_argument("--arm", choices=["before", "before-cut", "after", "cut", "mark"], default="after")
    ap.add_argument(
        "--cut-rows",
        type=int,
        default=0,
        help="cut arms: the checkpoint goes back to the last frame leaving at least this many rows past its "
        "watermark (0: the frame before the last)",
    )
    ap.add_argument(
        "--arms",
        default="before,before-cut,after,cut,mark",
        help="arms to run, in this order each repeat (before* need --before-src; a cut arm needs a full pass before "
        "it)",
    )
    ap.add_argument(
        "--snapshot-at",
        type=float,
        default=0.98,
        help="fraction of the write after which the done-set snapshot the cut arm restores is taken",
    )
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--stream-rows", type=int, default=10_000_000)
    ap.add_argument(
        "--fence-commits",
        type=int,
        default=0,
        help="also measure the lease's fence check over this many commits per arm",
    )
    ap.add_argument(
        "--fence-batch",
        type=int,
        default=1,
        help="rows per commit in the fence measurement (1: the check's worst share)",
    )
    ap.add_argument("--workdir", type=Path, default=Path("/tmp"))
    ap.add_argument(
        "--keep",
        type=Path,
        help="write the rows into this directory and keep it; a later run with the same "
        "--keep and --rows skips the write (the 10M write takes 8-14 min) and runs the arms on it",
    )
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/journal_bench.json")
    args = ap.parse_args()
    if args.child == "resume":
        return child_resume(args.prompts, args.outdir, args.endpoint, args.arm)
    if args.child == "stream":
        return child_stream(args.prompts)
    if args.child == "doneset":
        return child_doneset(args.outdir)

    report: dict = {"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"}
    work = args.keep or Path(tempfile.mkdtemp(prefix="fleetgen-journal-bench-", dir=args.workdir))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, str(ROOT / "bench/null_server.py"), "--ports", str(port)])
    try:
        if args.rows:
            prompts, outdir = work / "prompts.jsonl", work / "out"
            written = work / f"written-{args.rows}.json"  # a kept directory's write, done before
            if args.keep and written.exists():
                report["write"] = json.loads(written.read_text())
            else:
                if args.keep:
                    shutil.rmtree(work, ignore_errors=True)
                    work.mkdir(parents=True)
                write_prompts(prompts, args.rows)
                _record_identity(prompts, outdir)
                report["write"] = bench_write(outdir, args.rows, args.batch, args.snapshot_at)
                if args.keep:
                    written.write_text(json.dumps(report["write"]))
            w = report["write"]
            print(
                f"write {w['rows']:,} rows: {w['wall_s']:.1f} s, {w['rows_per_s']:,.0f} rows/s, {w['commits']} fsynced "
                "commits, "
                f"{w['bytes_per_row']:.0f} B/row",
                flush=True,
            )
            arms = [a for a in args.arms.split(",") if not a.startswith("before") or args.before_src]
            runs: dict[str, list[dict]] = {arm: [] for arm in arms}
            ckpt, cut_ckpt = outdir / "resume.ckpt", None
            for _ in range(args.repeats):
                for arm in runs:
                    if arm != "mark":
                        (outdir / "complete.json").unlink(missing_ok=True)
                    if arm in ("before", "after"):  # the full pass (after: the first resume after an upgrade)
                        for name in ("resume.ckpt", "resume.claims", "results.done", "prompts.stamp"):
                            (outdir / name).unlink(missing_ok=True)
                    if arm in ("cut", "before-cut"):
                        if cut_ckpt is None:  # the checkpoint the first full pass wrote, less its last frame
                            full = work / "resume.ckpt.full"  # kept by an earlier run's "after" arm (--keep)
                            cut_ckpt, cut_line = _cut_back(
                                full if full.exists() and "after" not in runs else ckpt, args.rows, args.cut_rows
                            )
                            report["cut_checkpoint"] = {
                                "watermark_line": cut_line,
                                "rows_past_it": args.rows - cut_line + 1,
                            }
                        ckpt.write_bytes(cut_ckpt)
                        early = work / "results.done.early"  # a killed run: its last snapshot predates the end
                        if early.exists():
                            shutil.copy(early, outdir / "results.done")
                    r = _child(
                        "resume",
                        "--arm",
                        arm,
                        "--prompts",
                        str(prompts),
                        "--outdir",
                        str(outdir),
                        "--endpoint",
                        f"http://127.0.0.1:{port}",
                        src=args.before_src if arm.startswith("before") else None,
                    )
                    assert r["resumed"] == args.rows and r["ok"] == 0, r
                    if arm == "after" and args.keep:
                        shutil.copy(ckpt, work / "resume.ckpt.full")
                    runs[arm].append(r)
                    print(
                        f"resume {args.rows:,} rows, {arm}: {r['wall_s']:.2f} s wall, {r['cpu_s']:.2f} s CPU "
                        f"(fingerprint {r['fingerprint_s']:.2f} s, Journal.open {r.get('journal_open_s', 0.0):.2f} s, "
                        f"snapshots used: done set {r.get('done_snapshot_used', '-')} "
                        f"{r.get('done_snapshot_refused', '')}, "
                        f"claims {r.get('claims_snapshot_used', '-')}), "
                        f"process {r['process_s']:.2f} s wall / {r['process_cpu_s']:.2f} s CPU, peak RSS "
                        f"{r['peak_rss_mib']:.0f} MiB",
                        flush=True,
                    )
            keys = (
                "wall_s",
                "cpu_s",
                "fingerprint_s",
                "journal_open_s",
                "checkpoint_open_s",
                "snapshot_save_s",
                "process_s",
                "process_cpu_s",
                "peak_rss_mib",
            )
            medians = {arm: {k: _median([r.get(k, 0.0) for r in rs]) for k in keys} for arm, rs in runs.items()}
            spread = {arm: [min(r["wall_s"] for r in rs), max(r["wall_s"] for r in rs)] for arm, rs in runs.items()}
            # Each arm against the code before doing the same: before-cut for cut, before for the rest.
            ratios = (
                {
                    arm: medians["before-cut" if arm == "cut" and "before-cut" in medians else "before"]["wall_s"]
                    / m["wall_s"]
                    for arm, m in medians.items()
                    if not arm.startswith("before")
                }
                if args.before_src and "before" in medians
                else None
            )
            report["resume"] = {"runs": runs, "medians": medians, "wall_range": spread, "before_over_arm_wall": ratios}
            for arm, m in medians.items():
                print(
                    f"resume median, {arm}: {m['wall_s']:.2f} s wall (range "
                    f"{spread[arm][0]:.2f}-{spread[arm][1]:.2f}), "
                    f"{m['cpu_s']:.2f} s CPU; fingerprint {m['fingerprint_s']:.2f}, Journal.open "
                    f"{m['journal_open_s']:.2f}, "
                    f"checkpoint {m['checkpoint_open_s']:.2f}, snapshot save {m['snapshot_save_s']:.2f}; process "
                    f"{m['process_s']:.2f} s"
                    + (f"; before / {arm} = {ratios[arm]:.2f}" if ratios and arm in ratios else ""),
                    flush=True,
                )
            if not args.keep:
                shutil.rmtree(work / "out")
                prompts.unlink()
        if args.fence_commits:
            report["fence"] = f = bench_fence(work, args.fence_commits, args.fence_batch, args.repeats)
            m = f["median_per_commit_us"]
            print(
                f"fence: {f['commits']} commits of {f['batch_rows']} row(s), median per commit: before "
                f"{m['before']:.1f} us, "
                f"after {m['after']:.1f} us, after / before = {f['after_over_before']:.3f}; the check alone "
                f"{f['check_us']:.2f} us",
                flush=True,
            )
        if args.doneset_rows:
            tiny = work / "tiny"
            t0 = time.monotonic()
            write_tiny(tiny, args.doneset_rows, args.samples)
            made = time.monotonic() - t0
            report["doneset"] = d = _child("doneset", "--outdir", str(tiny))
            assert d["rows"] == args.doneset_rows, d
            print(
                f"Journal.open of {d['rows']:,} rows ({args.samples} a prompt; written in {made:.0f} s): "
                f"{d['wall_s']:.1f} s wall, {d['cpu_s']:.1f} s CPU, table {d['table_mib']:.0f} MiB, "
                f"peak RSS {d['peak_rss_mib']:.0f} MiB (before: {d['rss_before_mib']:.0f} MiB)",
                flush=True,
            )
            shutil.rmtree(tiny)
        if args.stream_rows:
            prompts = work / "stream.jsonl"
            t0 = time.monotonic()
            write_prompts(prompts, args.stream_rows)
            report["stream_file"] = {
                "rows": args.stream_rows,
                "bytes": prompts.stat().st_size,
                "write_s": time.monotonic() - t0,
            }
            report["stream"] = st = _child("stream", "--prompts", str(prompts))
            print(
                f"stream {st['rows']:,} prompts ({report['stream_file']['bytes'] / 1e9:.2f} GB): {st['wall_s']:.0f} s, "
                f"{st['rows_per_s']:,.0f} rows/s, peak RSS {st['peak_rss_mib']:.0f} MiB",
                flush=True,
            )
    finally:
        server.kill()
        server.wait()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
