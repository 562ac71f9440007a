"""Fewer passes of Python's cycle collector while requests flow: they cost the client more than its own code.

A request's objects (aiohttp's request and response, the message dicts, the futures) are freed by
reference counting; almost none are in cycles. Yet with the default thresholds (700, 10, 10) the
collector ran ~2,600 times in 20,000 requests at 8 x 64 in flight and walked every live object,
the start-up's too (modules, config, the done set's bookkeeping): ~60 us of CPU per request against
the null server, about a quarter of the client's work (BENCHMARKS.md, "client at the limit"). While
the run loop drives requests, what exists at its start is frozen out of collections (`gc.freeze`)
and the young generation is collected every 50,000 allocations instead of 700. Cycles are
still collected, only less often; on exit both settings are put back as they were.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

YOUNG_THRESHOLD = 50_000


@contextmanager
def fewer_collections(young: int = YOUNG_THRESHOLD) -> Iterator[None]:
    """Freeze the objects that exist now and collect the young generation every `young` allocations, until exit.

    A caller's own settings win: a higher threshold is kept, and objects it froze itself stay frozen.
    """
    thresholds = gc.get_threshold()
    freeze = gc.get_freeze_count() == 0  # else the caller froze objects itself: leave them to it
    if freeze:
        gc.freeze()
    if thresholds[0]:  # 0: the caller turned collections off
        gc.set_threshold(max(thresholds[0], young), *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        if freeze:
            gc.unfreeze()
