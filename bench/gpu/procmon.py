"""Sample the CPU use of every process whose command line matches, once a second, until killed.

Why: on a small model the engine's own CPU processes (SGLang's HTTP + tokenizer manager, its
scheduler, its detokenizer) bound the request rate, and every extra request a client sends per
turn lands on the first of them. Prints one JSON line at SIGTERM: mean CPU % per process name.

    python3 bench/gpu/procmon.py sglang fleetgen plain_client > cpu.json &  ...;  kill %1
"""

from __future__ import annotations

import collections
import json
import signal
import sys
import time

import psutil


def main() -> None:
    patterns = sys.argv[1:]
    seen: dict[int, psutil.Process] = {}
    busy: collections.Counter[str] = collections.Counter()
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    t0 = time.monotonic()
    while not stop:
        for p in psutil.process_iter(["pid", "name", "cmdline"]):
            cmd = " ".join(p.info["cmdline"] or [])
            if p.pid not in seen and any(x in cmd for x in patterns) and "procmon" not in cmd:
                seen[p.pid] = p
                p.cpu_percent(None)
        time.sleep(1.0)
        for pid, p in list(seen.items()):
            try:
                busy[f"{p.name()}[{pid}]"] += p.cpu_percent(None)
            except psutil.Error:
                seen.pop(pid)
    secs = max(time.monotonic() - t0, 1e-9)
    n = max(int(secs), 1)
    print(
        json.dumps({"seconds": round(secs, 1), "mean_cpu_pct": {k: round(v / n, 1) for k, v in busy.most_common(12)}})
    )


if __name__ == "__main__":
    main()
