"""Token provenance: why a turn has no ids (none returned, count mismatch, refused), on every exported row; strict mode.

The servers are STAND-INs (tests/generate/standin_server.py): a real engine cannot be made to return ids whose count
disagrees with its usage, nor to refuse the id fields (SGLang 0.5.17 does, with streaming). The ids path on the real
engine: test_token_ids_engine.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pyarrow.parquet as pq
import pytest
from helpers import read_jsonl, write_prompts
from standin_server import StandinServer

from fleetgen.errors import MissingTokenIdsError
from fleetgen.export import ExportConfig, export
from fleetgen.generate import GenerateConfig, generate
from fleetgen.report import build_report
from fleetgen.rows.stats_file import merge_stats

SRC = Path(__file__).resolve().parents[2] / "src"
SGLANG_REFUSAL = "return_prompt_token_ids is not supported with streaming"
FINISHED = ["stop", "length"]


def _every_third(body: dict) -> bool:
    """Prompts p0, p3, ...: the stand-in answers them with one id more than its usage counts."""
    text = body["messages"][0]["content"]
    if "(" not in text:  # the warm-up request (generate/dispatch/warmup.py) is no prompt of the job
        return False
    return int(text.rsplit("(", 1)[1].rstrip(")")) % 3 == 0


@pytest.fixture
def server():
    started: list[StandinServer] = []

    def start(**kw) -> tuple[StandinServer, str]:
        s = StandinServer(**kw)
        started.append(s)
        return s, s.start()

    yield start
    for s in started:
        s.stop()


def _cfg(tmp_path, urls, out="out", **kw) -> GenerateConfig:
    # No warm-up: these stand-ins script their answers by request (warm-up is tests/generate/test_warmup.py's).
    return GenerateConfig(
        prompts=tmp_path / "p.jsonl",
        output_dir=tmp_path / out,
        endpoints=urls,
        max_tokens=8,
        hedge=False,
        commit_interval_s=0.0,
        warmup=False,
        **kw,
    )


def test_a_count_mismatch_is_recorded_per_turn_counted_apart_and_named_on_every_exported_row(tmp_path, server):
    write_prompts(tmp_path / "p.jsonl", 6)
    _, url = server(token_ids=True, mismatch_when=_every_third)
    stats = generate(_cfg(tmp_path, [url]), handle_signals=False)
    assert stats.ok == 6 and stats.turns_with_ids == 4 and stats.turns_without_ids == 2
    assert stats.ids_missing == {"mismatch": 2}
    rows = {r["id"]: r for r in read_jsonl(tmp_path / "out" / "results.jsonl")}
    assert rows["p0"]["token_ids"]["turns"] == [None] and rows["p0"]["token_ids"]["why"] == ["mismatch"]
    assert rows["p1"]["token_ids"]["turns"][0] is not None and "why" not in rows["p1"]["token_ids"]  # as before
    on_disk = json.loads((tmp_path / "out" / "stats.json").read_text())["token_ids"]
    assert on_disk["without_by_reason"] == {"none": 0, "mismatch": 2, "refused": 0}
    assert "without: count mismatch | 2 |" in build_report(tmp_path / "out", tokenizer="smollm2").read_text()

    s = export(
        ExportConfig(
            results_dir=tmp_path / "out",
            output=tmp_path / "t.parquet",
            format="tokens",
            tokenizer="smollm2",
            finish_reasons=FINISHED,
        )
    )
    assert s.from_ids == 4 and s.retokenized == {"count mismatch": 2}
    table = pq.read_table(tmp_path / "t.parquet").to_pylist()
    prov = {r["prompt_id"]: (r["ids_from"], r["ids_reason"]) for r in table}
    assert prov == {
        "p0": ("text", "count mismatch"),
        "p3": ("text", "count mismatch"),
        **{f"p{i}": ("ids", None) for i in (1, 2, 4, 5)},
    }
    export(
        ExportConfig(
            results_dir=tmp_path / "out",
            output=tmp_path / "s.jsonl",
            format="speculators",
            tokenizer="smollm2",
            finish_reasons=FINISHED,
        )
    )
    spec = [orjson.loads(line) for line in (tmp_path / "s.jsonl").read_bytes().splitlines()]
    assert {(r["metadata"]["prompt_id"], r["metadata"]["ids_from"], r["metadata"]["ids_reason"]) for r in spec} == {
        (p, *v) for p, v in prov.items()
    }


def test_an_endpoint_that_refuses_the_id_fields_is_downgraded_once_and_its_rows_say_refused(tmp_path, server):
    """Two replicas: one refuses the id fields as SGLang 0.5.17 does, the other returns ids."""
    write_prompts(tmp_path / "p.jsonl", 12)
    refusing, bad = server(refuse_ids=SGLANG_REFUSAL)
    _, good = server(token_ids=True)
    stats = generate(_cfg(tmp_path, [bad, good], concurrency=2), handle_signals=False)
    assert stats.ok == 12 and stats.errors == 0
    assert len(stats.notes) == 1 and bad in stats.notes[0] and SGLANG_REFUSAL in stats.notes[0]
    assert json.loads((tmp_path / "out" / "stats.json").read_text())["notes"] == stats.notes
    rows = read_jsonl(tmp_path / "out" / "results.jsonl")
    by_replica = {e: [r for r in rows if r["replica"] == e] for e in (bad, good)}
    assert by_replica[bad] and by_replica[good]
    assert all(r["token_ids"]["why"] == ["refused"] for r in by_replica[bad])
    assert all(r["token_ids"]["turns"][0] is not None for r in by_replica[good])
    assert stats.ids_missing == {"refused": len(by_replica[bad])}
    # Refused at most once per request that was in flight when it first refused; never again after.
    asked = [b for b in refusing.bodies if b.get("return_token_ids")]
    assert 1 <= len(asked) <= 2 and len(refusing.bodies) == len(asked) + len(by_replica[bad])
    assert refusing.bodies[-1].get("return_token_ids") is None
    s = export(
        ExportConfig(
            results_dir=tmp_path / "out",
            output=tmp_path / "t.parquet",
            format="tokens",
            tokenizer="smollm2",
            finish_reasons=FINISHED,
        )
    )
    assert s.retokenized == {"refused": len(by_replica[bad])} and s.from_ids == len(by_replica[good])


def test_require_token_ids_fails_the_job_naming_the_turn_and_records_no_row_without_ids(tmp_path, server):
    write_prompts(tmp_path / "p.jsonl", 6)
    _, plain = server()  # answers text only, like SGLang 0.5.12's chat endpoint
    with pytest.raises(MissingTokenIdsError, match=r"p\d#0 turn 0 \(none returned\)") as e:
        generate(_cfg(tmp_path, [plain], out="a", require_token_ids=True), handle_signals=False)
    assert e.value.turns and all(t[3] == "none returned" for t in e.value.turns)
    assert read_jsonl(tmp_path / "a" / "results.jsonl") == [] and read_jsonl(tmp_path / "a" / "errors.jsonl") == []

    _, mixed = server(token_ids=True, mismatch_when=_every_third)
    with pytest.raises(MissingTokenIdsError, match=r"count mismatch") as e:
        generate(_cfg(tmp_path, [mixed], out="b", require_token_ids=True, concurrency=1), handle_signals=False)
    assert {t[0] for t in e.value.turns} <= {"p0", "p3"}
    assert all(r["token_ids"]["turns"][0] is not None for r in read_jsonl(tmp_path / "b" / "results.jsonl"))
    # The samples it stopped on are not recorded: a run without the requirement does them.
    again = generate(_cfg(tmp_path, [mixed], out="b"), handle_signals=False)
    assert again.resumed + again.ok == 6

    _, refusing = server(refuse_ids=SGLANG_REFUSAL)
    with pytest.raises(MissingTokenIdsError, match=r"refused: HTTP 400: " + SGLANG_REFUSAL):
        generate(_cfg(tmp_path, [refusing], out="c", require_token_ids=True), handle_signals=False)
    with pytest.raises(ValueError, match="needs token_ids"):
        _cfg(tmp_path, [refusing], require_token_ids=True, token_ids=False)
    # The flag, as a user runs it: one line naming the turn, and a hint.
    cli = _cli(
        "generate",
        str(tmp_path / "p.jsonl"),
        "-o",
        str(tmp_path / "d"),
        "--endpoint",
        plain,
        "--max-tokens",
        "8",
        "--require-token-ids",
    )
    assert cli.returncode != 0 and "turn 0 (none returned)" in cli.stderr and "hint:" in cli.stderr


def test_export_require_token_ids_fails_naming_the_turns_and_writes_nothing(tmp_path, server):
    write_prompts(tmp_path / "p.jsonl", 6)
    _, url = server(token_ids=True, mismatch_when=_every_third)
    generate(_cfg(tmp_path, [url]), handle_signals=False)
    generate(_cfg(tmp_path, [url], out="plain", token_ids=False), handle_signals=False)
    for fmt, name in (("tokens", "t.parquet"), ("speculators", "s.jsonl")):
        with pytest.raises(
            MissingTokenIdsError, match=r"2 turn\(s\).*p0#0 turn 0 \(count mismatch\), p3#0 turn 0"
        ) as e:
            export(
                ExportConfig(
                    results_dir=tmp_path / "out",
                    output=tmp_path / name,
                    format=fmt,
                    tokenizer="smollm2",
                    finish_reasons=FINISHED,
                    require_token_ids=True,
                )
            )
        assert not (tmp_path / name).exists() and "nothing was written" in e.value.hint
    with pytest.raises(MissingTokenIdsError, match=r"6 turn\(s\).*\(not requested\)"):
        export(
            ExportConfig(
                results_dir=tmp_path / "plain",
                output=tmp_path / "t.parquet",
                format="tokens",
                tokenizer="smollm2",
                finish_reasons=FINISHED,
                require_token_ids=True,
            )
        )
    cli = _cli(
        "export",
        str(tmp_path / "out"),
        "-o",
        str(tmp_path / "t.parquet"),
        "--format",
        "tokens",
        "--tokenizer",
        "smollm2",
        "--finish-reason",
        "stop",
        "--finish-reason",
        "length",
        "--require-token-ids",
    )
    assert (
        cli.returncode != 0 and "p0#0 turn 0 (count mismatch)" in cli.stderr and not (tmp_path / "t.parquet").exists()
    )
    with pytest.raises(ValueError, match="tokens and speculators"):
        ExportConfig(
            results_dir=tmp_path / "out", output=tmp_path / "x.jsonl", format="specforge", require_token_ids=True
        )


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fleetgen.cli.app", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(SRC), "COLUMNS": "400"},
    )


def test_shard_stats_merge_the_reasons_and_notes():
    part = {
        "rows": {"total": 4, "ok": 2},
        "tokens": {},
        "token_ids": {
            "turns_with": 1,
            "turns_without": 1,
            "without_by_reason": {"none": 0, "mismatch": 1, "refused": 0},
        },
        "notes": ["x refused"],
    }
    merged = merge_stats([part, part])
    assert merged["token_ids"] == {
        "turns_with": 2,
        "turns_without": 2,
        "without_by_reason": {"none": 0, "mismatch": 2, "refused": 0},
    }
    assert merged["notes"] == ["x refused"]
