"""Token ids and loss masks from the target's chat template, checked on every row of a real SmolLM2 run."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from fleetgen.export import ExportConfig, RowRejected, TokensFormat, export

SMOL_DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

# A Qwen3-style template written for these tests: reasoning in <think>, tool calls in <tool_call>.
QWEN_LIKE = (
    "{%- for m in messages -%}"
    "{%- if m.role == 'assistant' -%}"
    "<|im_start|>assistant\n"
    "{% if m.reasoning_content and (keep_all or loop.last) %}"
    "<think>\n{{ m.reasoning_content }}\n</think>\n\n{% endif %}"
    "{{ m.content }}"
    "{%- for c in (m.tool_calls or []) %}"
    '<tool_call>{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments }}}</tool_call>{% endfor -%}'
    "<|im_end|>\n"
    "{%- else -%}"
    "<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif -%}"
)


def smol_text(messages: list[dict]) -> str:
    """SmolLM2's chat format, written out by hand (independent of the template engine)."""
    out = "" if messages[0]["role"] == "system" else f"<|im_start|>system\n{SMOL_DEFAULT_SYSTEM}<|im_end|>\n"
    return out + "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)


def masked_runs(tok, ids: list[int], mask: list[int]) -> list[str]:
    runs, cur = [], []
    for t, m in zip(ids, mask):
        if m:
            cur.append(t)
        elif cur:
            runs.append(tok.decode(cur, skip_special_tokens=False))
            cur = []
    if cur:
        runs.append(tok.decode(cur, skip_special_tokens=False))
    return runs


def _fmt(tok, template: str | None = None, **kw) -> TokensFormat:
    return TokensFormat(
        ExportConfig(results_dir=Path("."), output=Path("x.parquet"), format="tokens", **kw), tok, template
    )


def test_round_trip_passes_for_every_row_of_the_run(run_dir, results, tokenizer, tmp_path):
    out = tmp_path / "tokens.parquet"
    cfg = ExportConfig(
        results_dir=run_dir, output=out, format="tokens", tokenizer="smollm2", finish_reasons=["stop", "length"]
    )
    summary = export(cfg)
    assert dict(summary.failed) == {} and summary.read == len(results) == summary.rows_written
    table = pq.read_table(out)
    assert table.num_rows == len(results)
    assert table.schema.field("input_ids").type.value_type.bit_width == 32
    rows = table.to_pylist()
    assert all(
        len(r["input_ids"]) == len(r["loss_mask"]) and 0 < sum(r["loss_mask"]) < len(r["loss_mask"]) for r in rows
    )
    assert summary.supervised_tokens == sum(sum(r["loss_mask"]) for r in rows)


@pytest.mark.parametrize("kind", ["single-turn", "system-prompt", "multi-turn", "tool-call"])
def test_loss_mask_covers_exactly_the_assistant_turns(results, tokenizer, kind):
    fmt = _fmt(tokenizer)
    rows = [r for r in results if r["meta"]["kind"] == kind]
    assert rows, f"the fixture run has no {kind} rows"
    for rec in rows:
        [row] = fmt.convert(rec)
        ids, mask = row["input_ids"], row["loss_mask"]
        assert tokenizer.decode(ids, skip_special_tokens=False) == smol_text(rec["messages"])
        expected = [m["content"] + "<|im_end|>" for m in rec["messages"] if m["role"] == "assistant"]
        assert masked_runs(tokenizer, ids, mask) == expected
        if kind == "multi-turn":
            assert len(expected) >= 2
        if kind == "tool-call":
            assert any(m["role"] == "tool" for m in rec["messages"])


def _reasoning_rec() -> dict:
    return {
        "id": "r",
        "sample": 0,
        "finish_reason": ["tool_calls", "stop"],
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}],
        "messages": [
            {"role": "user", "content": "Weather in Oslo?"},
            {
                "role": "assistant",
                "content": "",
                "reasoning_content": "Call the tool.",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": '{"temp_c": 3}'},
            {"role": "assistant", "content": "It is 3 C.", "reasoning_content": "Tool says 3."},
        ],
    }


def test_reasoning_is_supervised_or_context_by_option(tokenizer):
    keep_all = "{%- set keep_all = true -%}" + QWEN_LIKE
    [train] = _fmt(tokenizer, keep_all).convert(_reasoning_rec())
    runs = masked_runs(tokenizer, train["input_ids"], train["loss_mask"])
    assert runs == [
        "<think>\nCall the tool.\n</think>\n\n"
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call><|im_end|>',
        "<think>\nTool says 3.\n</think>\n\nIt is 3 C.<|im_end|>",
    ]
    [ctx] = _fmt(tokenizer, keep_all, reasoning="context").convert(_reasoning_rec())
    assert ctx["input_ids"] == train["input_ids"]
    assert masked_runs(tokenizer, ctx["input_ids"], ctx["loss_mask"]) == [
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call><|im_end|>',
        "It is 3 C.<|im_end|>",
    ]
    [dropped] = _fmt(tokenizer, keep_all, reasoning="drop").convert(_reasoning_rec())
    assert "think" not in tokenizer.decode(dropped["input_ids"])


def test_template_mismatches_fail_loudly_with_a_reason(tokenizer):
    # SmolLM2's own template ignores tool_calls: training on it would teach the drafter an empty turn.
    with pytest.raises(RowRejected, match="does not render"):
        _fmt(tokenizer).convert(_reasoning_rec())


def test_rows_over_max_length_are_dropped_not_truncated(results, tokenizer):
    with pytest.raises(RowRejected, match="max_length"):
        _fmt(tokenizer, max_length=16).convert(results[0])
