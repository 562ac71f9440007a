"""Reasoning through generate and export: profiles x reasoning policy x export format.

A STAND-IN target (tests/generate/standin_server.py) that thinks on cue: it answers with
reasoning_content and content, and the token ids they stand for (the prompt rendered with the
embedded model's template, the completion `<think>\\nR\\n</think>\\n\\nC<|im_end|>`), unless the body
turns thinking off. No real engine here has a reasoning parser and a model that thinks on cue.
Checked for every cell: no stripped reasoning is ever supervised (nor in a row at all), and what is
supervised is exactly what was sampled (the sampled ids where they are the row, else the answer).
"""

from __future__ import annotations

import json
import shutil

import pytest
from helpers import read_jsonl
from standin_server import StandinServer

from fleetgen.export import ExportConfig, export
from fleetgen.generate import GenerateConfig, generate

pytest.importorskip("transformers")

PROFILES = [{"name": "cool", "temperature": 0.2}, {"name": "warm", "temperature": 1.0, "top_k": 20}]
EOT = "<|im_end|>"


def _rows():
    one = [{"role": "user", "content": f"question {i}"} for i in range(3)]
    rows = [{"id": f"q{i}", "messages": [m]} for i, m in enumerate(one)]
    rows.append(
        {
            "id": "two-turns",
            "messages": [
                {"role": "user", "content": "first ask"},
                {"role": "assistant", "content": "RECORDED"},
                {"role": "user", "content": "second ask"},
            ],
        }
    )
    return rows


def reasoning_of(ask: str) -> str:
    return f"Thinking hard about {ask}."


def answer_of(ask: str) -> str:
    return f"The answer to {ask}."


@pytest.fixture(scope="module", params=["smollm2", "think-token"])
def tokenizer_dir(request, tmp_path_factory):
    """The embedded tokenizer as is (`</think>` is several tokens), or with `<think>`/`</think>` as one token each."""
    from fleetgen.export import load_tokenizer
    from fleetgen.models.registry import resolve_model

    try:
        src = resolve_model("smollm2", prepare=False)
        tok = load_tokenizer("smollm2")
    except Exception as e:  # not prepared here
        pytest.skip(f"embedded tokenizer not available: {e}")
    if request.param == "smollm2":
        return src, tok
    d = tmp_path_factory.mktemp("think-token")
    tok.add_tokens(["<think>", "</think>"])
    tok.save_pretrained(d)
    shutil.copy(f"{src}/config.json", d / "config.json")
    tok = load_tokenizer(str(d))
    assert "</think>" in tok.get_vocab()
    return str(d), tok


@pytest.fixture(scope="module")
def thinking_target(tokenizer_dir):
    _, tok = tokenizer_dir

    def target(body):
        ask = [m for m in body["messages"] if m["role"] == "user"][-1]["content"]
        thinks = (body.get("chat_template_kwargs") or {}).get("enable_thinking") is not False
        prompt = tok.apply_chat_template(body["messages"], tokenize=False, add_generation_prompt=True)
        text = (f"<think>\n{reasoning_of(ask)}\n</think>\n\n" if thinks else "") + answer_of(ask) + EOT
        out = {
            "content": answer_of(ask),
            "prompt_token_ids": tok(prompt, add_special_tokens=False)["input_ids"],
            "token_ids": tok(text, add_special_tokens=False)["input_ids"],
        }
        if thinks:
            out["reasoning_content"] = reasoning_of(ask)
        return out

    server = StandinServer(respond=target)
    url = server.start()
    yield url
    server.stop()


def _asks(rec):
    """The user turn each regenerated assistant turn answers, in order."""
    asks, last = [], None
    for m in rec["messages"]:
        if m["role"] == "user":
            last = m["content"]
        elif m["role"] == "assistant":
            asks.append(last)
    return asks


def _runs(ids, mask):
    """The supervised runs of a row: contiguous spans of mask 1."""
    runs, cur = [], []
    for t, k in zip(ids, mask):
        if k:
            cur.append(t)
        elif cur:
            runs.append(cur)
            cur = []
    return runs + ([cur] if cur else [])


@pytest.mark.parametrize("with_profiles", [False, True], ids=["no-profiles", "profiles"])
@pytest.mark.parametrize("policy", ["save", "strip", "off"])
def test_no_stripped_reasoning_is_supervised_and_what_is_kept_was_sampled(
    tmp_path, tokenizer_dir, thinking_target, policy, with_profiles
):
    tok_path, tok = tokenizer_dir
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps(r) + "\n" for r in _rows()))
    out = tmp_path / "out"
    generate(
        GenerateConfig(
            prompts=prompts,
            output_dir=out,
            endpoints=[thinking_target],
            model="standin",
            samples=2,
            seed=3,
            max_tokens=64,
            hedge=False,
            commit_interval_s=0.0,
            reasoning=policy,
            profiles=PROFILES if with_profiles else [],
        ),
        handle_signals=False,
    )
    results = read_jsonl(out / "results.jsonl")
    assert len(results) == 8
    thinks = policy != "off"
    for r in results:
        # One shape on every row: the job's policies and what the first turn sent.
        assert r["sampling"]["reasoning"] == policy and r["sampling"]["truncation"] == "keep"
        assert {"max_tokens", "temperature", "top_p", "seed"} <= set(r["sampling"])
        assert ("profile" in r) == with_profiles

    dirs = [out]
    if with_profiles:
        # Rows of the old shape (a profile row's `sampling` without the policy): job.json says it.
        old = tmp_path / "old-shape"
        shutil.copytree(out, old)
        rows = read_jsonl(old / "results.jsonl")
        for r in rows:
            r["sampling"] = {k: v for k, v in r["sampling"].items() if k not in ("reasoning", "truncation")}
        (old / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        dirs.append(old)

    by_key = {f"{r['id']}#{r['sample']}": r for r in results}
    for d in dirs:
        # specforge: the conversation as kept; reasoning only where the policy saved it.
        spec = tmp_path / f"{d.name}-specforge.jsonl"
        export(ExportConfig(results_dir=d, output=spec, format="specforge"))
        for row in read_jsonl(spec):
            turns = [m for m in row["conversations"] if m["role"] == "assistant"]
            asks = _asks(by_key[row["id"]])
            assert [m["content"] for m in turns] == [answer_of(a) for a in asks]
            assert [m.get("reasoning_content") for m in turns] == [
                reasoning_of(a) if policy == "save" else None for a in asks
            ]

        for fmt in ("tokens", "speculators"):
            path = tmp_path / f"{d.name}-{fmt}.{'parquet' if fmt == 'tokens' else 'jsonl'}"
            summary = export(ExportConfig(results_dir=d, output=path, format=fmt, tokenizer=tok_path))
            if fmt == "tokens":
                import pyarrow.parquet as pq

                rows = pq.read_table(path).to_pylist()
                key = "prompt_id"
            else:
                rows = read_jsonl(path)
                key = "primary_id"
            assert summary.failed == {} and rows, (fmt, summary.failed)
            supervised: dict[str, list[str]] = {}
            for row in rows:
                conv = row[key] if fmt == "speculators" else f"{row['prompt_id']}#{row['sample']}"
                text = tok.decode(row["input_ids"], skip_special_tokens=False)
                if policy != "save":
                    assert "Thinking hard" not in text, (fmt, d.name, conv)  # not even as context
                runs = [tok.decode(run, skip_special_tokens=False) for run in _runs(row["input_ids"], row["loss_mask"])]
                supervised.setdefault(conv, []).extend(runs)
            for conv, runs in supervised.items():
                asks = _asks(by_key[conv])
                sampled = [
                    (f"<think>\n{reasoning_of(a)}\n</think>\n\n" if thinks else "") + answer_of(a) + EOT for a in asks
                ]
                answers = [answer_of(a) + EOT for a in asks]
                # speculators repeats no supervised turn either: each generation's row supervises its own.
                assert sorted(runs) == sorted(sampled if policy == "save" else answers), (fmt, d.name, conv, runs)
