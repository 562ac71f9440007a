"""Run the fleetgen CLI with a sampler thread that counts where its threads are, every few ms.

Why: py-spy needs ptrace, which the GPU machine's container may refuse, and cProfile slows the
client enough to change what it measures. Sampling `sys._current_frames()` costs little and says
which functions hold the event loop. At exit it writes the top functions (self and inclusive), as a share of thread
samples (an idle thread waiting counts too).

    python3 bench/gpu/stack_sampler.py OUT.txt generate prompts.jsonl -o out --endpoint URL ...
"""

from __future__ import annotations

import collections
import sys
import threading
import time


def main() -> int:
    out, argv = sys.argv[1], sys.argv[2:]
    me = 0
    self_counts: collections.Counter[str] = collections.Counter()
    incl_counts: collections.Counter[str] = collections.Counter()
    total = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal me
        me = threading.get_ident()
        while not done.wait(0.003):
            for ident, frame in sys._current_frames().items():
                if ident != me:
                    count(frame)

    def count(frame) -> None:
        nonlocal total
        total += 1
        seen = set()
        leaf = True
        while frame is not None:
            code = frame.f_code
            key = f"{code.co_filename.rsplit('/site-packages/', 1)[-1].rsplit('/src/', 1)[-1]}:{code.co_name}"
            if leaf:
                self_counts[key] += 1
                leaf = False
            if key not in seen:
                incl_counts[key] += 1
                seen.add(key)
            frame = frame.f_back

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    t0 = time.monotonic()
    from fleetgen.cli.app import main as cli_main

    try:
        sys.argv = ["fleetgen", *argv]
        cli_main()
        rc = 0
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 1
    finally:
        done.set()
        thread.join()
        with open(out, "w") as f:
            f.write(f"samples {total} over {time.monotonic() - t0:.1f}s\n## self\n")
            for k, n in self_counts.most_common(45):
                f.write(f"{100 * n / max(total, 1):6.1f}% {k}\n")
            f.write("## inclusive\n")
            for k, n in incl_counts.most_common(70):
                f.write(f"{100 * n / max(total, 1):6.1f}% {k}\n")
    return rc or 0


if __name__ == "__main__":
    sys.exit(main())
