"""Earlier reasoning in the history (generate/turns/history_reasoning.py):
decided from the target's template, sent as sampled.

The end-to-end test plays a Qwen3-style target with a STAND-IN server (tests/generate/standin_server.py):
no real engine here thinks on cue. The stand-in renders each request with the Qwen3-style fixture
template (tests/fixtures/templates/qwen3_style.jinja) through transformers, as an engine would, and
samples what that template would render for its own turn, with the token ids of both. What it must
see at every turn is what the target sees in its native agent loop: every assistant message sent
back as it was returned, reasoning included, and the template deciding what to show.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import read_jsonl
from standin_server import StandinServer

from fleetgen.generate import GenerateConfig, generate
from fleetgen.generate.turns.history_reasoning import decide, renders_history_reasoning
from fleetgen.rows.token_ids import recorded_turns

TEMPLATES = Path(__file__).resolve().parents[1] / "fixtures" / "templates"
QWEN3 = TEMPLATES / "qwen3_style.jinja"
EOT = "<|im_end|>"
TOOLS = [
    {
        "type": "function",
        "function": {"name": n, "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}},
    }
    for n in ("search", "fetch")
]


def call(name, q, cid):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps({"q": q})}}


# What the target does after each user ask: its calls, one step each, then its answer.
PLAN = {"ask one": [("search", "a")], "ask two": [("search", "b"), ("fetch", "c")]}
RECORD = [
    {"role": "user", "content": "ask one"},
    {"role": "assistant", "content": "", "tool_calls": [call("search", "a", "r1")]},
    {"role": "tool", "content": "found a", "tool_call_id": "r1"},
    {"role": "assistant", "content": "recorded answer one"},
    {"role": "user", "content": "ask two"},
    {"role": "assistant", "content": "", "tool_calls": [call("search", "b", "r2")]},
    {"role": "tool", "content": "found b", "tool_call_id": "r2"},
    {"role": "assistant", "content": "", "tool_calls": [call("fetch", "c", "r3")]},
    {"role": "tool", "content": "page c", "tool_call_id": "r3"},
    {"role": "assistant", "content": "recorded answer two"},
]


def test_the_default_follows_the_template():
    assert renders_history_reasoning(QWEN3.read_text())
    assert not renders_history_reasoning((TEMPLATES / "smollm2_hermes_tools.jinja").read_text())
    assert decide("template", str(QWEN3), None).policy == "keep"
    assert decide("template", str(TEMPLATES / "smollm2_hermes_tools.jinja"), None).policy == "drop"
    unknown = decide("template", None, None)
    assert unknown.policy == "drop" and "could not be read" in unknown.note and "--tokenizer" in unknown.note
    assert decide("keep", None, None).policy == "keep" and decide("drop", str(QWEN3), None).policy == "drop"
    assert decide("keep", None, None).identity() == {"history_reasoning": "keep"} and unknown.identity() == {}


def test_a_fleets_chat_template_flag_is_the_template_read(tmp_path):
    from fleetgen.fleet.state import FleetState, ReplicaState, write_state

    def fleet(command):
        replica = ReplicaState(
            index=0,
            endpoint="http://127.0.0.1:1",
            pid=1,
            create_time=0.0,
            engine="vllm",
            model="smollm2",
            served_model_name="smollm2",
            log_path="x",
            command=command,
        )
        d = tmp_path / str(len(list(tmp_path.iterdir())))
        write_state(
            d if d.mkdir() is None else d,
            FleetState(engine="vllm", model="smollm2", served_model_name="smollm2", replicas=[replica]),
        )
        return d

    assert decide("template", None, fleet(["serve", "--chat-template", str(QWEN3)])).policy == "keep"
    assert (
        decide("template", None, fleet([f"--chat-template={TEMPLATES / 'smollm2_hermes_tools.jinja'}"])).policy
        == "drop"
    )
    missing = decide("template", None, fleet(["--chat-template", "no-such-template"]))
    assert missing.policy == "drop" and "no-such-template" in missing.note


@pytest.fixture(scope="module")
def tok():
    pytest.importorskip("transformers")
    from fleetgen.export import load_tokenizer

    try:
        return load_tokenizer("smollm2")
    except Exception as e:  # not prepared here
        pytest.skip(f"embedded tokenizer not available: {e}")


def render(tok, messages, gen, **kwargs):
    return tok.apply_chat_template(
        messages, tools=TOOLS, chat_template=QWEN3.read_text(), tokenize=False, add_generation_prompt=gen, **kwargs
    )


@pytest.fixture(scope="module")
def qwen3_target(tok):
    """Answers by PLAN, thinking first; samples exactly what the template renders for the turn (and its ids)."""

    def target(body):
        msgs = body["messages"]
        last_user = max(i for i, m in enumerate(msgs) if m["role"] == "user")
        ask, step = msgs[last_user]["content"], sum(m["role"] == "tool" for m in msgs[last_user:])
        plan = PLAN.get(ask)
        if plan is None:
            return None  # generate's warm-up and path probes: plain text
        message = {"role": "assistant", "reasoning_content": f"Step {step} of {ask}: think it through."}
        if step < len(plan):
            name, q = plan[step]
            message |= {"content": "", "tool_calls": [call(name, q, f"srv-{step}")]}
        else:
            message["content"] = f"Done with {ask}."
        kwargs = body.get("chat_template_kwargs") or {}
        prompt = render(tok, msgs, True, **kwargs)
        full = render(tok, [*msgs, message], False, **kwargs)
        assert full.startswith(prompt)
        sampled = full[len(prompt) :].split(EOT)[0] + EOT
        return {
            **{k: v for k, v in message.items() if k != "role"},
            "prompt_token_ids": tok(prompt, add_special_tokens=False)["input_ids"],
            "token_ids": tok(sampled, add_special_tokens=False)["input_ids"],
        }

    server = StandinServer(respond=target)
    url = server.start()
    yield server, url
    server.stop()


def _run(tmp_path, url, name, **kw):
    prompts = tmp_path / f"{name}.jsonl"
    prompts.write_text(json.dumps({"id": name, "tools": TOOLS, "messages": RECORD}) + "\n")
    generate(
        GenerateConfig(
            prompts=prompts,
            output_dir=tmp_path / name,
            endpoints=[url],
            model="standin",
            max_tokens=64,
            hedge=False,
            commit_interval_s=0.0,
            **kw,
        ),
        handle_signals=False,
    )
    [row] = read_jsonl(tmp_path / name / "results.jsonl")
    assert row["cut"] is None and sum(m["role"] == "assistant" for m in row["messages"]) == 5
    return row


def _chain(row):
    """Per turn after the first: does its prompt extend the previous turn's prompt + completion?"""
    turns = recorded_turns(row)
    return [t.prompt[: len(p.prompt) + len(p.completion)] == p.prompt + p.completion for p, t in zip(turns, turns[1:])]


# The policy under test; history_reasoning defaults to template, which reads this template and keeps.
POLICY = {"tokenizer": str(QWEN3)}


def test_each_turns_prompt_is_what_the_target_sees_in_its_native_loop(tmp_path, tok, qwen3_target):
    server, url = qwen3_target
    server.bodies.clear()
    row = _run(tmp_path, url, "native", **POLICY)
    assert row["sampling"].get("history_reasoning") == "keep"
    bodies = [b for b in server.bodies if b["messages"][0]["content"] == "ask one"]
    assert len(bodies) == 5
    # The native loop: each assistant message sent back as the server returned it (reasoning included).
    native = row["messages"]  # reasoning: save keeps every turn's reasoning_content as returned
    at = [i for i, m in enumerate(native) if m["role"] == "assistant"]
    for k, (body, i) in enumerate(zip(bodies, at)):
        assert render(tok, body["messages"], True) == render(tok, native[:i], True), f"turn {k}"
    # The steps of the second tool loop show their earlier step's reasoning; the template drops the first ask's.
    last_prompt = render(tok, bodies[-1]["messages"], True)
    assert "Step 0 of ask two" in last_prompt and "Step 1 of ask two" in last_prompt and "of ask one" not in last_prompt
    # Every turn's prompt ids extend the previous turn's, but where a new user ask drops the reasoning before it.
    assert _chain(row) == [True, False, True, True]


def test_dropped_history_reasoning_puts_tool_steps_off_the_native_prompt(tmp_path, tok, qwen3_target):
    server, url = qwen3_target
    server.bodies.clear()
    row = _run(tmp_path, url, "dropped", tokenizer=str(QWEN3), history_reasoning="drop")
    assert "history_reasoning" not in row["sampling"]
    bodies = [b for b in server.bodies if b["messages"][0]["content"] == "ask one"]
    assert all("reasoning_content" not in m for b in bodies for m in b["messages"])
    native = row["messages"]
    at = [i for i, m in enumerate(native) if m["role"] == "assistant"]
    differ = [
        k
        for k, (b, i) in enumerate(zip(bodies, at))
        if render(tok, b["messages"], True) != render(tok, native[:i], True)
    ]
    assert differ == [1, 3, 4]  # every step after a tool result: the template shows its earlier steps' reasoning
    assert _chain(row) == [False, False, False, False]


def test_stripped_rows_still_send_the_reasoning_back(tmp_path, tok, qwen3_target):
    server, url = qwen3_target
    server.bodies.clear()
    row = _run(tmp_path, url, "stripped", reasoning="strip", **POLICY)
    assert all("reasoning_content" not in m for m in row["messages"])
    bodies = [b for b in server.bodies if b["messages"][0]["content"] == "ask one"]
    sent = [m["reasoning_content"] for m in bodies[-1]["messages"] if m["role"] == "assistant"]
    assert sent == [
        "Step 0 of ask one: think it through.",
        "Step 1 of ask one: think it through.",
        "Step 0 of ask two: think it through.",
        "Step 1 of ask two: think it through.",
    ]
