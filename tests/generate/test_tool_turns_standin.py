"""Tool conversations through generate and export against a STAND-IN server scripted to diverge.

The stand-in (tests/generate/standin_server.py) plays a target that, per scenario, makes the
recorded calls, makes them in another order, makes only some, answers without calling, calls
another function or the same one with other arguments. No real engine can be told to do each of
these on cue; the real-engine run is in test_tool_turns_engine.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers import read_jsonl
from standin_server import StandinServer

from fleetgen.export import ExportConfig, export
from fleetgen.generate import GenerateConfig, generate
from fleetgen.generate.turns.tool_turns import call_arguments, call_name

TOOLS = [
    {
        "type": "function",
        "function": {"name": n, "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
    }
    for n in ("get_weather", "get_time")
]


def call(name, args, cid=None):
    return {
        **({"id": cid} if cid else {}),
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }


PARIS, ROME = {"city": "Paris"}, {"city": "Rome"}
ONE = [
    {"role": "assistant", "content": "", "tool_calls": [call("get_weather", PARIS, "c1")]},
    {"role": "tool", "content": "sunny, 21C", "tool_call_id": "c1"},
    {"role": "assistant", "content": "RECORDED"},
]
TWO = [
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [call("get_weather", PARIS, "c1"), call("get_weather", ROME, "c2")],
    },
    {"role": "tool", "content": "sunny", "tool_call_id": "c1"},
    {"role": "tool", "content": "rain", "tool_call_id": "c2"},
    {"role": "assistant", "content": "RECORDED"},
]

# scenario -> (recorded turns after the user's, what the stand-in target does at turn 0)
SCENARIOS = {
    "same": (ONE, [call("get_weather", {"city": "Paris"})]),
    "same-spacing": (
        ONE,
        [{"type": "function", "function": {"name": "get_weather", "arguments": '{ "city" :"Paris" }'}}],
    ),
    "no-call": (ONE, None),
    "other-function": (ONE, [call("get_time", PARIS)]),
    "other-arguments": (ONE, [call("get_weather", {"city": "London"})]),
    "parallel-swapped": (TWO, [call("get_weather", ROME), call("get_weather", PARIS)]),
    "parallel-subset": (TWO, [call("get_weather", ROME)]),
    "no-recorded-result": (TWO[:2] + TWO[3:], [call("get_weather", PARIS), call("get_weather", ROME)]),
    "orphan-result": (
        ONE[:2] + [{"role": "tool", "content": "stale", "tool_call_id": "c9"}] + ONE[2:],
        [call("get_weather", PARIS)],
    ),
    "call-where-record-answered": (
        [
            {"role": "assistant", "content": "RECORDED"},
            {"role": "user", "content": "And now?"},
            {"role": "assistant", "content": "RECORDED"},
        ],
        [call("get_weather", PARIS)],
    ),
    "final-call": ([], [call("get_weather", PARIS)]),
    "result-without-call": (
        [{"role": "tool", "content": "stray", "tool_call_id": "c5"}, {"role": "assistant", "content": "RECORDED"}],
        None,
    ),
}
CUT = {
    "no-call": "answered_without_call",
    "other-function": "other_function",
    "other-arguments": "other_arguments",
    "no-recorded-result": "no_recorded_result",
    "call-where-record-answered": "unrecorded_call",
}


def target(body):
    """The scripted target: its first turn per scenario, plain text afterwards."""
    if any(m["role"] == "assistant" for m in body["messages"]):
        return None
    scenario = body["messages"][0]["content"].split("]")[0].lstrip("[")
    if scenario not in SCENARIOS:
        return None  # generate's warm-up request (generate/dispatch/warmup.py): plain text
    calls = SCENARIOS[scenario][1]
    if calls is None:
        return {"content": "I think it is sunny."}
    return {"content": "", "tool_calls": [{**c, "id": f"srv-{i}"} for i, c in enumerate(calls)]}


@pytest.fixture(scope="module")
def standin():
    server = StandinServer(respond=target)
    url = server.start()
    yield server, url
    server.stop()


def run(tmp_path, url, **kw):
    rows = [
        {"id": name, "tools": TOOLS, "messages": [{"role": "user", "content": f"[{name}] weather?"}, *turns]}
        for name, (turns, _) in SCENARIOS.items()
    ]
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = GenerateConfig(
        prompts=prompts,
        output_dir=tmp_path / "out",
        endpoints=[url],
        model="standin",
        max_tokens=32,
        hedge=False,
        commit_interval_s=0.0,
        **kw,
    )
    stats = generate(cfg, handle_signals=False)
    return {r["id"]: r for r in read_jsonl(tmp_path / "out" / "results.jsonl")}, stats, rows


def assert_coherent(messages, recorded_rows, rid, match="arguments"):
    """Every tool message answers a call the target made in the assistant turn just before it, with the
    recorded call's function (and arguments) that the result answered in the record."""
    recorded_calls = {c["id"]: c for m in recorded_rows[rid] for c in m.get("tool_calls") or [] if c.get("id")}
    made: dict[str, dict] = {}
    for m in messages:
        if m["role"] == "assistant":
            made = {c["id"]: c for c in m.get("tool_calls") or []}
        elif m["role"] == "tool":
            assert m["tool_call_id"] in made, f"{rid}: result {m} answers no call the target made"
            twin, mine = recorded_calls[m["tool_call_id"]], made[m["tool_call_id"]]
            assert call_name(mine) == call_name(twin)
            if match == "arguments":
                assert call_arguments(mine) == call_arguments(twin)
        elif m["role"] == "user":
            made = {}


def test_scripted_divergence_keeps_only_results_the_target_asked_for(tmp_path, standin):
    _, url = standin
    rows, stats, prompt_rows = run(tmp_path, url)
    recorded = {r["id"]: r["messages"] for r in prompt_rows}
    assert set(rows) == set(SCENARIOS)
    for rid, r in rows.items():
        assert_coherent(r["messages"], recorded, rid)
        roles = [m["role"] for m in r["messages"]]
        if rid in CUT:
            assert r["cut"]["reason"] == CUT[rid], rid
            assert r["cut"]["turn"] == 0 and r["cut"]["message"] == 1 == len(r["messages"]) - 1
            assert roles == ["user", "assistant"] and r["messages"][-1]["content"] != "RECORDED"
            assert r["cut"]["recorded_messages_dropped"] == len(SCENARIOS[rid][0]) - 1
            assert r["cut"]["detail"]
        else:
            assert r["cut"] is None, rid
    assert [m["role"] for m in rows["same"]["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert rows["same"]["messages"][1]["tool_calls"][0]["id"] == "c1"  # the recorded id, so the result stays attached
    assert rows["same-spacing"]["cut"] is None
    swapped = rows["parallel-swapped"]["messages"]
    # The results follow the target's calls (Rome, then Paris), each naming the call it answers.
    assert [c["id"] for c in swapped[1]["tool_calls"]] == ["c2", "c1"] and [m["content"] for m in swapped[2:4]] == [
        "rain",
        "sunny",
    ]
    assert [m["tool_call_id"] for m in swapped[2:4]] == ["c2", "c1"]
    subset = rows["parallel-subset"]
    assert [m["content"] for m in subset["messages"] if m["role"] == "tool"] == ["rain"]
    assert [d["tool_call_id"] for d in subset["dropped_tool_results"]] == ["c1"]
    assert [d["tool_call_id"] for d in rows["orphan-result"]["dropped_tool_results"]] == ["c9"]
    stray = rows["result-without-call"]
    assert [m["role"] for m in stray["messages"]] == ["user", "assistant"] and stray["cut"] is None
    assert [d["tool_call_id"] for d in stray["dropped_tool_results"]] == ["c5"]
    assert rows["final-call"]["messages"][-1]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert all(m["content"] != "RECORDED" for r in rows.values() for m in r["messages"])

    # The counts: stats (the run's object and stats.json) agree with the rows.
    by_reason = {}
    for r in rows.values():
        if r["cut"]:
            by_reason[r["cut"]["reason"]] = by_reason.get(r["cut"]["reason"], 0) + 1
    tool_turns = json.loads((tmp_path / "out" / "stats.json").read_text())["tool_turns"]
    assert tool_turns["cut_by_reason"] == by_reason == {v: 1 for v in CUT.values()}
    assert tool_turns["cut"] == len(CUT) == sum(stats.tool_cuts.values())
    assert tool_turns["results_dropped"] == 3
    assert tool_turns["results_kept"] == sum(m["role"] == "tool" for r in rows.values() for m in r["messages"]) == 6

    # The report counts and explains the cuts.
    from fleetgen.report import build_report

    md = build_report(tmp_path / "out", tokenizer=str(tmp_path / "no-tokenizer")).read_text()
    section = md.split("## Tool turns")[1].split("## ")[0]
    for reason in CUT.values():
        assert f"| {reason} | 1 |" in section, section
    assert "Recorded tool results kept: 6; dropped because their call was not made: 3" in section

    # Export: the training rows hold the same coherent conversations, cut ones included.
    for fmt in ("openai", "specforge"):
        out = tmp_path / f"{fmt}.jsonl"
        export(ExportConfig(results_dir=tmp_path / "out", output=out, format=fmt))
        exported = {r["id"].split("#")[0]: r for r in read_jsonl(out)}
        assert set(exported) == set(SCENARIOS), fmt
        for rid, r in exported.items():
            assert_coherent(r.get("messages") or r.get("conversations"), recorded, rid)


def test_name_policy_keeps_a_result_after_other_arguments(tmp_path, standin):
    _, url = standin
    rows, _, prompt_rows = run(tmp_path, url, tool_match="name")
    r = rows["other-arguments"]
    assert r["cut"] is None and [m["role"] for m in r["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert_coherent(r["messages"], {x["id"]: x["messages"] for x in prompt_rows}, "other-arguments", match="name")
    assert rows["other-function"]["cut"]["reason"] == "other_function"
    assert json.loads((tmp_path / "out" / "job.json").read_text())["sampling"]["tool_match"] == "name"


TEMPLATE = Path(__file__).resolve().parents[1] / "fixtures" / "templates" / "smollm2_hermes_tools.jinja"
CITIES = ("Paris", "Rome", "Lima")
WEATHER = {"Paris": "sunny", "Rome": "rain", "Lima": "fog"}


def test_a_positional_template_shows_each_swapped_call_its_own_result(tmp_path):
    """The history the server gets next, rendered with a template that pairs results with calls by position."""
    pytest.importorskip("transformers")
    from transformers import AutoTokenizer

    from fleetgen.models.registry import resolve_model

    try:
        tok = AutoTokenizer.from_pretrained(resolve_model("smollm2", prepare=False))
    except Exception as e:  # not prepared on this machine
        pytest.skip(f"embedded tokenizer not available: {e}")
    recorded = [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [call("get_weather", {"city": c}, f"c{i}") for i, c in enumerate(CITIES)],
        },
        *({"role": "tool", "content": WEATHER[c], "tool_call_id": f"c{i}"} for i, c in enumerate(CITIES)),
        {"role": "assistant", "content": "RECORDED"},
    ]
    orders = {"reversed": ["Lima", "Rome", "Paris"], "rotated": ["Rome", "Lima", "Paris"], "same": list(CITIES)}

    def target(body):
        if any(m["role"] == "assistant" for m in body["messages"]):
            return {"content": "done"}
        order = orders.get(body["messages"][0]["content"])
        if order is None:
            return None  # generate's warm-up and path probes: plain text
        return {
            "content": "",
            "tool_calls": [{**call("get_weather", {"city": c}), "id": f"srv-{k}"} for k, c in enumerate(order)],
        }

    server = StandinServer(respond=target)
    url = server.start()
    try:
        prompts = tmp_path / "p.jsonl"
        prompts.write_text(
            "".join(
                json.dumps({"id": n, "tools": TOOLS, "messages": [{"role": "user", "content": n}, *recorded]}) + "\n"
                for n in orders
            )
        )
        generate(
            GenerateConfig(
                prompts=prompts,
                output_dir=tmp_path / "out",
                endpoints=[url],
                model="standin",
                max_tokens=16,
                hedge=False,
                commit_interval_s=0.0,
            ),
            handle_signals=False,
        )
        second = {
            b["messages"][0]["content"]: b for b in server.bodies if any(m["role"] == "tool" for m in b["messages"])
        }
    finally:
        server.stop()
    assert set(second) == set(orders)
    for name, order in orders.items():
        text = tok.apply_chat_template(
            second[name]["messages"],
            tools=TOOLS,
            chat_template=TEMPLATE.read_text(),
            tokenize=False,
            add_generation_prompt=True,
        )
        turn = text.split("<|im_start|>user\n" + name + "<|im_end|>\n", 1)[1]  # past the template's worked examples
        called = re.findall(r'<tool_call>\n\{"name": "get_weather", "arguments": \{"city": "(\w+)"\}\}', turn)
        answered = re.findall(r"<tool_response>\n(\w+)\n</tool_response>", turn)
        assert called == order, name
        assert answered == [WEATHER[c] for c in order], f"{name}: the k-th result must answer the k-th call"
