"""The journal's writer task: group commit without stalling the run loop."""

from __future__ import annotations

import asyncio

import orjson

from fleetgen.generate.journal.directory import RESULTS, Journal
from fleetgen.generate.journal.outcomes import Completed
from fleetgen.generate.journal.writer import Writer
from fleetgen.generate.observe.stats import Stats

ROW = {"messages": [], "finish_reason": ["stop"]}


def test_a_full_batch_is_committed_without_waiting_out_the_interval(tmp_path):
    """Four queues' worth of outcomes with a commit interval of an hour: each half-full queue commits at once.

    The writer before this waited out the interval after each commit, so a producer faster than
    queue_size / interval blocked in `put` (here: for an hour; the guard ends the test instead).
    """
    journal, done = Journal.open(tmp_path, retry_errors=False)
    stats = Stats()
    writer = Writer(journal, done, stats, queue_size=8, commit_interval_s=3600.0)

    async def main() -> None:
        task = asyncio.create_task(writer.run())
        async with asyncio.timeout(60):  # a guard against a hang, far above what the 32 commits take
            for i in range(32):
                await writer.put(Completed(f"p{i}", 0, ROW, False, 1, 1))
            await writer.close()
            await task

    asyncio.run(main())
    journal.close()
    rows = [orjson.loads(x) for x in (tmp_path / RESULTS).read_bytes().splitlines()]
    assert sorted(r["id"] for r in rows) == sorted(f"p{i}" for i in range(32))
    assert stats.ok == 32


def test_outcomes_put_within_one_interval_share_a_commit(tmp_path):
    """Fewer outcomes than a full batch gather into one write and fsync (group commit still groups)."""
    journal, done = Journal.open(tmp_path, retry_errors=False)
    commits: list[int] = []
    inner = journal.commit
    journal.commit = lambda results, errors, keys=None: (commits.append(len(results)), inner(results, errors, keys))[1]  # type: ignore[method-assign]
    writer = Writer(journal, done, Stats(), queue_size=64, commit_interval_s=3600.0)

    async def main() -> None:
        task = asyncio.create_task(writer.run())
        async with asyncio.timeout(60):
            await writer.put(Completed("first", 0, ROW, False, 1, 1))
            await asyncio.sleep(0)  # the writer takes the first outcome alone, commits it, then gathers
            while not commits:
                await asyncio.sleep(0.01)
            for i in range(10):
                await writer.put(Completed(f"p{i}", 0, ROW, False, 1, 1))
            await writer.close()
            await task

    asyncio.run(main())
    journal.close()
    assert commits == [1, 10]
