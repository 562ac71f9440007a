"""Fewer passes of Python's cycle collector while requests flow: they cost the client more than its own code.

A request's objects (aiohttp's request and response, the message dicts, the futures) are freed by
reference counting; almost none are in cycles. Yet with the default thresholds (700, 10, 10) the
collector runs thousands of times in a job and walks every live object each time, the start-up's
too (modules, config, the done set's bookkeeping): a large share of the client's own CPU per
request (measured in BENCHMARKS.md, "client at the limit"). While
the run loop drives requests, what exists at its start is frozen out of collections (`gc.freeze`)
and the young generation is collected every 50,000 allocations instead of 700. Cycles are
still collected, only less often.

The collector's settings belong to the whole process, and `generate.run()` is public: a caller may
run several at once (tasks of one loop, or threads) or one inside another. So the tuning is held,
not set: the first run to enter saves the settings and tunes them, later ones only join, and the
last one to leave puts back what the first found. Each run setting and restoring on its own would
leave the process tuned whenever the runs do not end in the reverse order they began.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

YOUNG_THRESHOLD = 50_000

_lock = threading.Lock()
_holders = 0  # runs inside fewer_collections now, in any thread
_saved: tuple[int, ...] = ()  # the thresholds the first of them found
_froze = False  # whether the first of them froze (and so the last must unfreeze)


@contextmanager
def fewer_collections(young: int = YOUNG_THRESHOLD) -> Iterator[None]:
    """Freeze the objects that exist now and collect the young generation every `young` allocations, until exit.

    A caller's own settings win: a higher threshold is kept, and objects it froze itself stay frozen.
    Nested and concurrent uses share one tuning; the settings come back when the last one exits.
    """
    global _holders, _saved, _froze
    with _lock:
        if _holders == 0:
            _saved = gc.get_threshold()
            _froze = gc.get_freeze_count() == 0  # else the caller froze objects itself: leave them to it
            if _froze:
                gc.freeze()
            if _saved[0]:  # 0: the caller turned collections off
                gc.set_threshold(max(_saved[0], young), *_saved[1:])
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0:
                gc.set_threshold(*_saved)
                _saved = ()  # hold nothing between runs: a caller's own gc.freeze() must not catch it
                if _froze:
                    gc.unfreeze()
