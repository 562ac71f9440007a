"""CLI start-up: `fleetgen --help`, `status`, `down` and `import fleetgen.cli.app`, before and after, side by side.

Each command runs as a fresh process (what a user waits for: interpreter start, imports, the
command, exit), `--repeats` times per arm, the arms interleaved run by run so load from other
work on the machine falls on both alike (a hyperfine-like loop; hyperfine is not installed here).
"before" runs the source tree given by `--before-src` (e.g. `git archive main src | tar -x -C
/tmp/before`), "after" this checkout's src/. `status` and `down` run against an empty state
directory: status reads the state and stops (no fleet, so no replica to probe and no throughput
sample); down finds nothing to stop. Reports the median, min and max wall per command and arm.
The before tree is first on the path, so a dependency installed into it is the before arm's own:
`pip install --no-deps --target /tmp/before/src typer==0.29.2` measures a typer change as well.

Usage: .venv/bin/python bench/cli_startup.py --before-src /tmp/before/src [--repeats 15] [--out
bench/results/cli_startup.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def commands(state: Path) -> dict[str, list[str]]:
    app = [sys.executable, "-m", "fleetgen.cli.app"]
    return {
        "import fleetgen.cli.app": [sys.executable, "-c", "import fleetgen.cli.app"],
        "fleetgen --help": [*app, "--help"],
        "fleetgen generate --help": [*app, "generate", "--help"],
        "fleetgen status (no fleet)": [*app, "status", "--state", str(state)],
        "fleetgen down (no fleet)": [*app, "down", "--state", str(state)],
    }


def run_once(argv: list[str], src: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(src)}
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before-src", type=Path, required=True)
    ap.add_argument("--after-src", type=Path, default=ROOT / "src")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/cli_startup.json")
    args = ap.parse_args()
    arms = {"before": args.before_src.resolve(), "after": args.after_src.resolve()}
    state = Path(tempfile.mkdtemp(prefix="fleetgen-cli-bench-"))
    cmds = commands(state / "fleet")
    times: dict[str, dict[str, list[float]]] = {c: {a: [] for a in arms} for c in cmds}
    for argv in cmds.values():  # warm the page cache and the .pyc files of both trees
        for src in arms.values():
            run_once(argv, src)
    for _ in range(args.repeats):
        for name, argv in cmds.items():
            for arm, src in arms.items():
                times[name][arm].append(run_once(argv, src))
    report = {
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "load_average": os.getloadavg(),
        "repeats": args.repeats,
        "commands": {},
    }
    print(f"{'command':30} {'before median (min-max)':>26} {'after median (min-max)':>26} {'before/after':>12}")
    for name, by_arm in times.items():
        row = {arm: {"median_s": statistics.median(v), "min_s": min(v), "max_s": max(v)} for arm, v in by_arm.items()}
        row["ratio"] = row["before"]["median_s"] / row["after"]["median_s"]
        report["commands"][name] = row
        cells = [f"{row[a]['median_s']:.3f} ({row[a]['min_s']:.3f}-{row[a]['max_s']:.3f})" for a in arms]
        print(f"{name:30} {cells[0]:>26} {cells[1]:>26} {row['ratio']:>12.2f}")
    print(f"load average at the end: {report['load_average']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
