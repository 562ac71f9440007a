"""The report counts a capture of its results: rows, bytes, throughput per run, text-path rows apart.

The capture output here is written by hand, as the capture stage writes it (docs/capture-formats.md):
the report reads files and needs no engine. A real capture output is checked in tests/capture.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson

from fleetgen.report import build_report
from fleetgen.rows.capture_journal import find_captures, read_capture

RUN = Path(__file__).parents[1] / "export" / "fixtures" / "smollm2-run"
T0 = 1_800_000_000.0


def _jsonl(path: Path, rows: list[dict], tail: bytes = b"") -> None:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows) + tail)


def _capture(tmp_path: Path) -> tuple[Path, Path]:
    """A generate output and a capture of it: 2 runs (the first killed), 5 rows (2 from text), a torn line."""
    gen = tmp_path / "generate"
    shutil.copytree(RUN, gen)
    keys = [(r["id"], r["sample"]) for r in map(orjson.loads, (gen / "results.jsonl").read_bytes().splitlines())]
    out = tmp_path / "capture"
    (out / "hidden_states").mkdir(parents=True)
    identity = {
        "model": "smollm2",
        "layers": [2, 15, 27, 30],
        "preset": "eagle3",
        "dtype": "bf16",
        "backend": "vllm",
        "hidden_size": 576,
        "num_layers": 30,
        "bytes_per_token": 4616,
        "source": str(gen.resolve()),
        "format": "speculators",
    }
    (out / "capture.json").write_bytes(orjson.dumps(identity))
    rows = []
    for i, (rid, sample) in enumerate(keys[:5]):
        size = 100 * 4616 + 160
        (out / "hidden_states" / f"hs_{i}.safetensors").write_bytes(b"\0" * size)
        ts = T0 + 10 + i if i < 2 else T0 + 100 + 2 * i  # rows 0-1 in the killed run, 2-4 in the second
        rows.append(
            {
                "id": rid,
                "sample": sample,
                "index": i,
                "file": f"hidden_states/hs_{i}.safetensors",
                "rows": 1,
                "lengths": [100],
                "tokens": 100,
                "bytes": size,
                "seconds": 0.5,
                "ids_from": "text" if i in (1, 3) else "recorded",
                "ts": ts,
            }
        )
    _jsonl(out / "captured.jsonl", rows, tail=b'{"id": "torn-by-a-ki')  # a kill mid-append: never counted
    (out / "hidden_states" / "hs_5.safetensors.tmp").write_bytes(b"\0" * 10)  # a kill mid-file: not counted
    _jsonl(
        out / "runs.jsonl",
        [
            {"event": "start", "ts": T0, "planned_tokens": 6300},  # killed: no end event
            {"event": "start", "ts": T0 + 100, "planned_tokens": 6100},
            {"event": "end", "ts": T0 + 110, "captured": 3, "stopped": None},
        ],
    )
    _jsonl(
        out / "capture_errors.jsonl",
        [
            {"id": keys[2][0], "sample": keys[2][1], "reason": "server error", "ts": T0 + 11},  # captured later
            {"id": keys[7][0], "sample": keys[7][1], "reason": "longer than --max-length", "ts": T0 + 105},
        ],
    )
    return gen, out


def test_capture_journal_counts_rows_bytes_runs_and_text_rows_apart(tmp_path):
    gen, out = _capture(tmp_path)
    assert find_captures(gen) == [out.resolve()]  # a sibling whose capture.json names the results
    c = read_capture(out)
    assert (c.rows, c.files, c.tokens, c.bytes) == (5, 5, 500, 5 * (100 * 4616 + 160))
    assert (c.recorded, c.from_text, c.from_text_tokens) == (3, 2, 200)
    assert c.torn_lines == 1
    assert dict(c.failed) == {"longer than --max-length": 1}  # the server error was captured by a later run
    killed, second = c.runs
    assert killed.ended_at is None and killed.rows == 2 and killed.wall_s == 11  # start to its last row
    assert second.rows == 3 and second.wall_s == 10 and second.planned_tokens == 6100
    assert c.wall_s == 21 and abs(c.tokens_per_s - 500 / 21) < 1e-9


def test_report_has_a_hidden_states_section_per_capture(tmp_path):
    gen, out = _capture(tmp_path)
    md = build_report(gen, dest=tmp_path / "report", tokenizer="/nonexistent").read_text()
    section = md[md.index("## Hidden states") :]
    section = section[: section.index("\n## ", 1)] if "\n## " in section[1:] else section
    n_results = len((gen / "results.jsonl").read_bytes().splitlines())
    assert f"| captured (id, sample) of the result rows | 5 of {n_results} (" in section
    assert "| with the ids the rows recorded | 3 |" in section.replace("|   with", "| with")
    assert "(the row recorded none) | 2 (200 tokens) |" in section
    assert f"| bytes (journal) | {5 * 461760} (2.31 MB) |" in section
    assert "| wall time (s), the sum of the 2 runs (1 killed) | 21.0 |" in section
    assert "| tokens / s | 23.8 |" in section  # 500 tokens over 21 s
    assert "| not captured: longer than --max-length | 1 |" in section
    assert "killed (no end event)" in section and "| finished |" in section
    assert "eagle3: 2,15,27,30" in section
    # a report of a generate output without a capture has no such section
    bare = tmp_path / "bare"
    shutil.copytree(RUN, bare)
    assert "## Hidden states" not in build_report(bare, dest=tmp_path / "r2", tokenizer="/nonexistent").read_text()


def test_files_a_kill_left_beyond_the_journal_are_named_not_counted(tmp_path):
    gen, out = _capture(tmp_path)
    (out / "hidden_states" / "hs_5.safetensors").write_bytes(b"\0" * 99)  # renamed, its journal line never written
    md = build_report(gen, dest=tmp_path / "report", tokenizer="/nonexistent").read_text()
    assert "(a kill's leftovers: the next run replaces them) | 1 and 1 |" in md
    assert "| hidden-state files (hs_*.safetensors) | 5 |" in md
