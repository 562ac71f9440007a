"""SIGTERM and SIGINT during a fleet's start cancel the start, so its cleanup stops what was started.

A SIGTERM is not a Python exception: without a handler the process just ends, and replicas that
`up` had already started (each in its own session, to outlive `up`) keep running (seen on the
H200: `up` ended by `timeout` left both replicas up). Here the signal cancels the task doing the
start; `up` then stops every replica it started and clears the state, and says which signal it was.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from contextlib import contextmanager

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Received:
    """The signal that cancelled the start, if one did."""

    name: str | None = None


@contextmanager
def cancel_on_signals() -> Iterator[Received]:
    """While inside, SIGTERM/SIGINT cancel the current task; the handlers before are put back after."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    got = Received()
    installed: dict[int, object] = {}

    def on_signal(sig: signal.Signals) -> None:
        if got.name is None:
            got.name = sig.name
        if task is not None:
            task.cancel()

    for sig in SIGNALS:
        try:
            previous = signal.getsignal(sig)
            loop.add_signal_handler(sig, on_signal, sig)
        except (ValueError, RuntimeError, NotImplementedError):  # not the main thread: leave signals alone
            continue
        installed[sig] = previous
    try:
        yield got
    finally:
        for sig, previous in installed.items():
            loop.remove_signal_handler(sig)
            if previous is not None:
                signal.signal(sig, previous)  # e.g. asyncio.Runner's own SIGINT handler
