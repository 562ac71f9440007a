"""How the report groups runs.jsonl's processes into runs and gives each row to one (report/runs.py).

The records here are written by the test (what `generate` appends, rows/runs.py): shards that ran at
once are one run; a killed process is followed by the next on its journal; rows outside every run
are counted apart, never dropped.
"""

from __future__ import annotations

from pathlib import Path

from fleetgen.report.data import Row, Run
from fleetgen.report.runs import attribute, spans
from fleetgen.rows.runs import RunRecord, read_runs, run_ended, run_started


def rec(run: str, start: float, end: float | None, shard: str = "", wall: float | None = None) -> RunRecord:
    stats = {"wall_s": wall} if wall is not None else {}
    return RunRecord(run, start, shard=shard, ended_at=end, stats=stats if end is not None else {})


def row(start: float, latency: float = 1.0) -> Row:
    return Row(
        id=f"r{start}",
        domain="d",
        source="s",
        prompt_tokens=1,
        completion_tokens=10,
        finish=["stop"],
        replicas=["a"],
        started_at=start,
        ended_at=start + latency,
        has_reasoning=False,
        reasoning_chars=0,
        answer_chars=1,
    )


def test_shards_of_one_command_are_one_run_and_a_killed_run_ends_where_its_journal_s_next_one_starts():
    records = [
        rec("a0", 100.0, 150.0, ".shard-0-of-2", wall=50.0),
        rec("a1", 101.0, 160.0, ".shard-1-of-2", wall=59.0),
        rec("k", 200.0, None),  # killed: no end line
        rec("z", 300.0, 320.0, wall=20.0),
    ]
    got = spans(records)
    assert [[r.run for r in s.records] for s in got] == [["a0", "a1"], ["k"], ["z"]]
    assert got[0].wall_s == 60.0  # two processes: the span's own length
    assert got[1].killed and got[1].bound == 300.0 and "killed" in got[1].outcome
    assert got[2].wall_s == 20.0 and got[2].outcome == "finished"


def test_each_row_goes_to_the_run_it_was_sent_in_and_none_is_lost():
    run = Run(outdir=Path("."))
    run.runs = [rec("a", 100.0, 150.0, wall=50.0), rec("k", 200.0, None), rec("z", 300.0, 320.0, wall=20.0)]
    run.rows = [row(50.0), row(120.0), row(170.0), row(210.0), row(290.0), row(305.0)]
    got, unrecorded = attribute(run)
    assert [[r.started_at for r in s.rows] for s in got] == [[120.0], [210.0, 290.0], [305.0]]
    assert [r.started_at for r in unrecorded] == [50.0, 170.0]  # before the first run; between a run's end and the next
    assert got[1].end == 291.0 and got[1].wall_s == 91.0  # killed: counted to its last row's end
    assert sum(len(s.rows) for s in got) + len(unrecorded) == len(run.rows)


def test_runs_jsonl_round_trip_and_a_torn_last_line(tmp_path):
    a = run_started(tmp_path, shard="", job="j1", model_path="/models/x")
    run_ended(tmp_path, a, {"wall_s": 3.5, "interrupted": False})
    b = run_started(tmp_path, job="j1")
    with open(tmp_path / "runs.jsonl", "ab") as f:
        f.write(b'{"run": "c", "event": "sta')  # a crash mid-append
    got = read_runs(tmp_path)
    assert [r.run for r in got] == [a, b]
    assert got[0].model_path == "/models/x" and got[0].wall_s == 3.5 and got[1].ended_at is None
