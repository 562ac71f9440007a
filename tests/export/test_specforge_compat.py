"""fleetgen's specforge rows against SpecForge's documented row shape, field for field."""

from __future__ import annotations

from pathlib import Path

from export_helpers import FIXTURES, read_jsonl

from fleetgen.export import ExportConfig
from fleetgen.export.formats import SpecForgeFormat

SPECFORGE_ROWS = FIXTURES / "specforge" / "rows.jsonl"


def _as_result(row: dict) -> dict:
    """A fleetgen result record holding the SpecForge row's conversation (as generate would write it)."""
    n = sum(m["role"] == "assistant" for m in row["conversations"])
    return {
        "id": row["id"],
        "sample": 0,
        "messages": row["conversations"],
        "tools": row.get("tools"),
        "meta": {"domain": "general"},
        "finish_reason": ["stop"] * n,
        "usage": {"prompt_tokens": 1, "completion_tokens": 9},
        "replica": "http://r0",
        "model": "m",
        "sampling": {"temperature": 0.7},
        "timing": {"started_at": 0, "latency_s": 1},
    }


def _shape(value):
    """The type tree of a value: what a trainer's loader sees."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shape(v) for v in value]
    return type(value).__name__


def test_specforge_rows_round_trip_field_for_field():
    fmt = SpecForgeFormat(ExportConfig(results_dir=Path("."), output=Path("x.jsonl")))
    for ref in read_jsonl(SPECFORGE_ROWS):
        [got] = fmt.convert(_as_result(ref))
        assert got["id"] == f"{ref['id']}#0"  # one row per (id, sample): the stable row id names the sample
        assert {k: v for k, v in got.items() if k != "id"} == {k: v for k, v in ref.items() if k != "id"}


def test_real_run_rows_have_specforges_fields_and_types(run_dir, results):
    refs = read_jsonl(SPECFORGE_ROWS)
    top_keys = set().union(*(r.keys() for r in refs))
    msg_shapes = {}
    for r in refs:
        for m in r["conversations"]:
            for k, v in m.items():
                msg_shapes.setdefault(k, _shape(v))
    fmt = SpecForgeFormat(ExportConfig(results_dir=run_dir, output=Path("x.jsonl")))
    for rec in results:
        [row] = fmt.convert(rec)
        # SpecForge passes unknown top-level columns to the chat template: there must be none.
        assert set(row) <= top_keys
        assert isinstance(row["id"], str) and isinstance(row["conversations"], list)
        if "tools" in row:
            assert _shape(row["tools"])[0].keys() == _shape(refs[-1]["tools"])[0].keys()
        for m in row["conversations"]:
            assert set(m) <= set(msg_shapes), set(m) - set(msg_shapes)
            for k, v in m.items():
                if k != "tool_calls":
                    assert _shape(v) == msg_shapes[k], (k, v)
        roles = [m["role"] for m in row["conversations"]]
        assert roles[0] in ("system", "user") and "assistant" in roles
