"""The report's charts: no text over the data, and reasoning vs answer in tokens split at `</think>`.

The reasoning rows here are SYNTHETIC (written by the test, with token ids of a tokenizer the test
builds with the real `tokenizers` library): SmolLM2, the model the real fleet serves, writes no reasoning.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from fleetgen.report import build_report, load_run, plots
from fleetgen.rows.token_ids import TurnIds, TurnIdsLog

RUN = Path(__file__).parents[1] / "export" / "fixtures" / "smollm2-run"
WORDS = ["<unk>", "<|im_end|>", "</think>", "hmm", "let", "me", "think", "the", "answer", "is", "four", "ok"]


@pytest.fixture
def figures(monkeypatch) -> list:
    """Every figure the report draws, kept open for inspection (then saved as usual)."""
    seen: list = []
    real = plots.save

    def keep(fig, path):
        fig.canvas.draw()
        seen.append((path.name, fig, [(ax, ax.get_window_extent(), ax.get_legend()) for ax in fig.axes]))
        return real(fig, path)

    monkeypatch.setattr(plots, "save", keep)
    return seen


def reasoning_run(tmp_path: Path) -> Path:
    """Two result rows with reasoning_content and the ids of a small word-level tokenizer that has `</think>`."""
    tok_dir = tmp_path / "tok"
    tok_dir.mkdir()
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(["<|im_end|>", "</think>"])
    tok.save(str(tok_dir / "tokenizer.json"))
    (tok_dir / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>"}))
    ids = {w: i for i, w in enumerate(WORDS)}
    out = tmp_path / "run"
    out.mkdir()
    rows = []
    for k, (reasoning, answer) in enumerate([("hmm let me think", "the answer is four"), ("ok", "four")]):
        log = TurnIdsLog()
        sampled = (
            [ids[w] for w in reasoning.split()]
            + [ids["</think>"]]
            + [ids[w] for w in answer.split()]
            + [ids["<|im_end|>"]]
        )
        log.add(TurnIds([1, 2, 3], sampled))
        rows.append(
            {
                "id": f"r{k}",
                "sample": 0,
                "meta": {"domain": "math" if k else "general"},
                "messages": [
                    {"role": "user", "content": "2+2?"},
                    {"role": "assistant", "content": answer, "reasoning_content": reasoning},
                ],
                "finish_reason": ["stop"],
                "truncated": False,
                "usage": {"prompt_tokens": 3, "completion_tokens": len(sampled)},
                "replica": "http://127.0.0.1:1",
                "model": "m",
                "timing": {"started_at": 1000.0 + k, "latency_s": 2.0},
                "token_ids": log.record(),
            }
        )
    (out / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out


def test_no_legend_or_note_sits_over_the_data(figures, tmp_path):
    build_report(RUN, dest=tmp_path / "a")
    build_report(reasoning_run(tmp_path), dest=tmp_path / "b", tokenizer=str(tmp_path / "tok"))
    assert {name for name, _, _ in figures} >= {"throughput.png", "output_lengths.png", "reasoning_vs_answer.png"}
    for name, _fig, axes in figures:
        for ax, box, legend in axes:
            assert not ax.texts, f"{name}: text drawn inside the axes: {[t.get_text() for t in ax.texts]}"
            if legend is not None:
                assert not legend.get_window_extent().overlaps(box), f"{name}: the legend overlaps the plot"


def test_reasoning_and_answer_tokens_come_from_the_ids_split_at_think_close(tmp_path):
    out = reasoning_run(tmp_path)
    think_close = WORDS.index("</think>")
    rows = {r.id: r for r in load_run(out, think_close=think_close).rows}
    assert (rows["r0"].reasoning_tokens, rows["r0"].answer_tokens) == (5, 5)  # 4 words + </think>; 4 words + end
    assert (rows["r1"].reasoning_tokens, rows["r1"].answer_tokens) == (2, 2)
    assert all(r.reasoning_tokens is None for r in load_run(out).rows)  # no tokenizer: they cannot be told apart
    md = build_report(out, dest=tmp_path / "report", tokenizer=str(tmp_path / "tok")).read_text()
    assert (
        "in tokens (sampled ids, split at `</think>`)" in md and "![reasoning vs answer](reasoning_vs_answer.png)" in md
    )
    md = build_report(out, dest=tmp_path / "chars").read_text()
    assert "in characters (tokens cannot be told apart without the tokenizer's `</think>` id" in md
