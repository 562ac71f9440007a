"""Conversations whose earlier turns the chat template rewrites become one row per turn, as the server saw them.

The template is tests/export/fixtures/templates/think-drops-old-reasoning.jinja: ChatML framing, reasoning
in <think> only for assistant turns after the last user message (how Qwen3-style thinking templates behave).
Expected texts are written out by hand, independent of the template engine.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pyarrow.parquet as pq
import pytest
from export_helpers import FIXTURES
from test_export_tokens import QWEN_LIKE, _fmt, _reasoning_rec, masked_runs

from fleetgen.export import ExportConfig, RowRejected, export

TEMPLATE = (FIXTURES / "templates" / "think-drops-old-reasoning.jinja").read_text(encoding="utf-8")


def _u(text: str) -> str:
    return f"<|im_start|>user\n{text}<|im_end|>\n"


def _a(content: str, reasoning: str | None = None) -> str:
    think = f"<think>\n{reasoning}\n</think>\n\n" if reasoning else ""
    return f"<|im_start|>assistant\n{think}{content}<|im_end|>\n"


def _chat() -> dict:
    """Two user turns, each answered with reasoning: the second user turn rewrites the first answer."""
    return {
        "id": "chat",
        "sample": 1,
        "finish_reason": ["stop", "stop"],
        "messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello!", "reasoning_content": "Greet back."},
            {"role": "user", "content": "What is 2+2?"},
            {"role": "assistant", "content": "It is 4.", "reasoning_content": "Add two and two."},
        ],
    }


def _agent() -> dict:
    """A tool call and its answer under the first user turn, then a second user turn."""
    rec = _reasoning_rec()
    rec["id"], rec["finish_reason"] = "agent", ["tool_calls", "stop", "stop"]
    rec["messages"] += [
        {"role": "user", "content": "And tomorrow?"},
        {"role": "assistant", "content": "No forecast.", "reasoning_content": "No tool for that."},
    ]
    return rec


CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>'


def _text(tokenizer, row: dict) -> str:
    return tokenizer.decode(row["input_ids"], skip_special_tokens=False)


def test_each_turn_is_its_own_row_with_the_context_the_server_saw(tokenizer):
    rows = _fmt(tokenizer, TEMPLATE).convert(_chat())
    assert [r["id"] for r in rows] == ["chat#1/turn0", "chat#1/turn1"]
    assert all(r["prompt_id"] == "chat" and r["sample"] == 1 for r in rows)
    first, second = rows
    assert _text(tokenizer, first) == _u("Hi") + _a("Hello!", "Greet back.")
    assert masked_runs(tokenizer, first["input_ids"], first["loss_mask"]) == [
        "<think>\nGreet back.\n</think>\n\nHello!<|im_end|>"
    ]
    # Turn 0 is context here, without its reasoning: the template dropped it when the server generated turn 1.
    assert _text(tokenizer, second) == _u("Hi") + _a("Hello!") + _u("What is 2+2?") + _a("It is 4.", "Add two and two.")
    assert masked_runs(tokenizer, second["input_ids"], second["loss_mask"]) == [
        "<think>\nAdd two and two.\n</think>\n\nIt is 4.<|im_end|>"
    ]
    # The mask ends the row: nothing after the supervised turn but the template's trailing newline.
    assert second["loss_mask"][-2:] == [1, 0] and first["loss_mask"][-2:] == [1, 0]


def test_reasoning_context_masks_it_out_and_drop_needs_no_split(tokenizer):
    train = _fmt(tokenizer, TEMPLATE).convert(_chat())
    ctx = _fmt(tokenizer, TEMPLATE, reasoning="context").convert(_chat())
    assert [r["id"] for r in ctx] == [r["id"] for r in train]
    assert [r["input_ids"] for r in ctx] == [r["input_ids"] for r in train]
    assert [masked_runs(tokenizer, r["input_ids"], r["loss_mask"]) for r in ctx] == [
        ["Hello!<|im_end|>"],
        ["It is 4.<|im_end|>"],
    ]
    # Without reasoning nothing is rewritten: one row, every answer supervised, the usual id.
    [dropped] = _fmt(tokenizer, TEMPLATE, reasoning="drop").convert(_chat())
    assert dropped["id"] == "chat#1"
    assert _text(tokenizer, dropped) == _u("Hi") + _a("Hello!") + _u("What is 2+2?") + _a("It is 4.")
    assert masked_runs(tokenizer, dropped["input_ids"], dropped["loss_mask"]) == [
        "Hello!<|im_end|>",
        "It is 4.<|im_end|>",
    ]


def test_a_prefix_stable_conversation_is_still_one_row(tokenizer):
    # One user turn: both assistant turns come after it and keep their reasoning in every rendering.
    [row] = _fmt(tokenizer, TEMPLATE).convert(_reasoning_rec())
    full = (
        _u("Weather in Oslo?")
        + _a(CALL, "Call the tool.")
        + '<|im_start|>tool\n{"temp_c": 3}<|im_end|>\n'
        + _a("It is 3 C.", "Tool says 3.")
    )
    # As before splitting existed: the whole conversation encoded once, every assistant turn supervised.
    assert row == {
        "id": "r#0",
        "prompt_id": "r",
        "sample": 0,
        "input_ids": tokenizer(full, add_special_tokens=False)["input_ids"],
        "loss_mask": row["loss_mask"],
        "ids_from": "text",
        "ids_reason": "not requested",  # the record holds no token ids
    }
    assert masked_runs(tokenizer, row["input_ids"], row["loss_mask"]) == [
        f"<think>\nCall the tool.\n</think>\n\n{CALL}<|im_end|>",
        "<think>\nTool says 3.\n</think>\n\nIt is 3 C.<|im_end|>",
    ]


def test_turns_one_rendering_keeps_share_a_row(tokenizer):
    # The tool call and the answer of the first user turn render alike until the second user turn: one row.
    rows = _fmt(tokenizer, TEMPLATE).convert(_agent())
    assert [r["id"] for r in rows] == ["agent#0/turn1", "agent#0/turn2"]
    tool = '<|im_start|>tool\n{"temp_c": 3}<|im_end|>\n'
    assert _text(tokenizer, rows[0]) == (
        _u("Weather in Oslo?") + _a(CALL, "Call the tool.") + tool + _a("It is 3 C.", "Tool says 3.")
    )
    assert masked_runs(tokenizer, rows[0]["input_ids"], rows[0]["loss_mask"]) == [
        f"<think>\nCall the tool.\n</think>\n\n{CALL}<|im_end|>",
        "<think>\nTool says 3.\n</think>\n\nIt is 3 C.<|im_end|>",
    ]
    assert _text(tokenizer, rows[1]) == (
        _u("Weather in Oslo?")
        + _a(CALL)
        + tool
        + _a("It is 3 C.")
        + _u("And tomorrow?")
        + _a("No forecast.", "No tool for that.")
    )
    assert masked_runs(tokenizer, rows[1]["input_ids"], rows[1]["loss_mask"]) == [
        "<think>\nNo tool for that.\n</think>\n\nNo forecast.<|im_end|>"
    ]
    # A template that keeps reasoning on the last message only rewrites every earlier turn: a row per turn.
    last_only = "{%- set keep_all = false -%}" + QWEN_LIKE
    assert [r["id"] for r in _fmt(tokenizer, last_only).convert(_agent())] == [
        "agent#0/turn0",
        "agent#0/turn1",
        "agent#0/turn2",
    ]


def test_a_split_row_failing_its_checks_rejects_the_conversation(tokenizer):
    with pytest.raises(RowRejected, match="max_length"):
        _fmt(tokenizer, TEMPLATE, max_length=40).convert(_chat())  # the first row fits, the second does not
    assert len(_fmt(tokenizer, TEMPLATE, max_length=60).convert(_chat())) == 2


@pytest.fixture()
def qwen_like_tokenizer(tokenizer, tmp_path: Path) -> Path:
    """The SmolLM2 tokenizer directory with the test template as its chat template."""
    src, dst = Path(tokenizer.name_or_path), tmp_path / "tokenizer"
    dst.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "config.json"):
        shutil.copy(src / name, dst / name)
    (dst / "chat_template.jinja").write_text(TEMPLATE, encoding="utf-8")
    return dst


def _results(tmp_path: Path, *recs: dict) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "results.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))
    return run


def test_export_counts_split_conversations_and_ids_are_stable(qwen_like_tokenizer, tmp_path):
    run = _results(tmp_path, _chat(), _reasoning_rec(), _agent())
    tables = []
    for name in ("a.parquet", "b.parquet"):
        cfg = ExportConfig(results_dir=run, output=tmp_path / name, format="tokens", tokenizer=str(qwen_like_tokenizer))
        summary = export(cfg)
        assert (summary.read, summary.split_conversations, summary.split_rows, summary.extra_rows) == (3, 2, 4, 2)
        assert summary.rows_written == 5 and dict(summary.failed) == {}
        assert summary.to_dict()["split_conversations"] == 2 and summary.to_dict()["split_rows"] == 4
        tables.append(pq.read_table(tmp_path / name))
    ids = tables[0].column("id").to_pylist()
    assert ids == ["chat#1/turn0", "chat#1/turn1", "r#0", "agent#0/turn1", "agent#0/turn2"]
    assert tables[0].equals(tables[1])
    assert tables[0].schema.names == ["id", "prompt_id", "sample", "input_ids", "loss_mask", "ids_from", "ids_reason"]


def test_split_rows_are_filtered_one_by_one_and_stay_in_their_prompts_split(qwen_like_tokenizer, tmp_path):
    run = _results(tmp_path, _chat(), _reasoning_rec(), _agent())
    cfg = ExportConfig(
        results_dir=run,
        output=tmp_path / "out",
        format="tokens",
        tokenizer=str(qwen_like_tokenizer),
        reasoning="context",
        min_supervised_tokens=4,
        eval_fraction=0.5,
    )
    summary = export(cfg)
    # "Hello!<|im_end|>" is 3 tokens, "It is 4.<|im_end|>" 6: only the first row of the chat is filtered.
    assert dict(summary.filtered) == {"fewer than 4 supervised tokens": 1}
    assert summary.read + summary.extra_rows == summary.rows_written + sum(summary.filtered.values()) + sum(
        summary.failed.values()
    )
    splits = {name: pq.read_table(path).to_pylist() for name, path in cfg.output_paths().items()}
    ids = [r["id"] for rows in splits.values() for r in rows]
    assert sorted(ids) == sorted(["chat#1/turn1", "r#0", "agent#0/turn1", "agent#0/turn2"])
    for rows in splits.values():
        for other in splits.values():
            if other is not rows:
                assert not {r["prompt_id"] for r in rows} & {r["prompt_id"] for r in other}
