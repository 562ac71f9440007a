"""Peak memory of export's dedup: every record of a results file through `iter_results`, one source tree per child.

`fleetgen export` and `fleetgen report` read results with `iter_results`, which drops repeated
(id, sample) pairs. This writes N result rows (distinct ids of realistic length, one sample each:
the worst case for generate's done set, which packs an id's samples into one slot; plus 1% repeats)
into a temporary directory, then in a child process per tree iterates them all and reports wall
time, rows read, duplicates dropped and the child's peak RSS, beside the same child that only parses
the lines (the floor: interpreter, imports, one record at a time).

    .venv/bin/python bench/export_dedup_memory.py BEFORE_SRC AFTER_SRC [--rows 10000000]

BEFORE_SRC is a source tree of the old code, e.g. `git archive <commit> src | tar -x -C /tmp/before`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = """
import resource, sys, time
from pathlib import Path
mode, outdir = sys.argv[1], Path(sys.argv[2])
t0 = time.perf_counter()
n = dups = 0
if mode == "parse":
    import orjson
    for line in open(outdir / "results.jsonl", "rb"):
        orjson.loads(line)
        n += 1
else:
    from fleetgen.export.results import ReadCounts, iter_results
    counts = ReadCounts()
    for rec in iter_results(outdir, counts):
        n += 1
    dups = counts.duplicates
wall = time.perf_counter() - t0
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(f'{{"rows": {n}, "duplicates": {dups}, "wall_s": {wall:.1f}, "peak_rss_mb": {rss:.0f}}}')
"""


def write_results(path: Path, rows: int) -> None:
    """`rows` distinct (id, 0) records and 1% of them again, in ~1 MB writes."""

    def line(i: int) -> bytes:
        return (
            b'{"id":"infinity_instruct-%010d","sample":0,"messages":[{"role":"user","content":"q"},'
            b'{"role":"assistant","content":"a"}],"finish_reason":["stop"]}\n' % i
        )

    repeat_every = 100
    with open(path, "wb") as f:
        buf = []
        for i in range(rows):
            buf.append(line(i))
            if i % repeat_every == repeat_every - 1:
                buf.append(line(i - repeat_every // 2))  # a row seen 50 rows before
            if len(buf) >= 10_000:
                f.write(b"".join(buf))
                buf.clear()
        f.write(b"".join(buf))


def child(src: str | None, mode: str, outdir: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": src} if src else dict(os.environ)
    out = subprocess.run([sys.executable, "-c", CHILD, mode, str(outdir)], env=env, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("before_src")
    ap.add_argument("after_src")
    ap.add_argument("--rows", type=int, default=10_000_000)
    a = ap.parse_args()
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, python "
        f"{platform.python_version()}"
    )
    with tempfile.TemporaryDirectory() as d:
        outdir = Path(d)
        write_results(outdir / "results.jsonl", a.rows)
        size = (outdir / "results.jsonl").stat().st_size
        print(f"results.jsonl: {a.rows} distinct rows + {a.rows // 100} repeats, {size / 1e9:.2f} GB")
        floor = child(None, "parse", outdir)
        print(f"parse only (floor): {floor}")
        got = {}
        for name, src in (("before", a.before_src), ("after", a.after_src)):
            got[name] = child(src, "dedup", outdir)
            print(f"{name} ({src}): {got[name]}")
    b, f = got["before"], got["after"]
    print(
        f"peak RSS after/before: {f['peak_rss_mb'] / b['peak_rss_mb']:.2f}; "
        f"above the floor: {b['peak_rss_mb'] - floor['peak_rss_mb']:.0f} MB -> "
        f"{f['peak_rss_mb'] - floor['peak_rss_mb']:.0f} MB; "
        f"wall after/before: {f['wall_s'] / b['wall_s']:.2f}"
    )
    sys.exit(0 if b["rows"] == f["rows"] and b["duplicates"] == f["duplicates"] else 1)


if __name__ == "__main__":
    main()
