"""Each adapter on its committed fixture: the real schema, its quirks, and bad rows counted, not fatal."""

from __future__ import annotations

import json

import pytest

from fleetgen.errors import ConfigError
from fleetgen.mix.adapters import ADAPTERS, get_adapter
from fleetgen.mix.build import make_record
from fleetgen.mix.recipe import SourceSpec
from fleetgen.mix.sources import BadLine, RowSource
from fleetgen.rows.prompt import RecordError, validate_prompt_record


def load(fixtures, adapter, filename, **spec):
    """(records by position, {position: skip reason}) for one fixture file."""
    s = SourceSpec(name="s", adapter=adapter, path=str(fixtures / filename), **spec)
    a = get_adapter(adapter)
    recs, bad = {}, {}
    for pos, row in RowSource(s).rows():
        if isinstance(row, BadLine):
            bad[pos] = row.reason
            continue
        try:
            recs[pos] = make_record(s, a, row, pos)
        except RecordError as e:
            bad[pos] = e.reason
    for r in recs.values():
        assert validate_prompt_record(json.loads(json.dumps(r.to_dict()))) == []
    return recs, bad


def test_registry_lists_every_dataset_adapter():
    assert {
        "infinity_instruct",
        "webinstructsub",
        "codefeedback",
        "metamathqa",
        "hermes_function_calling",
        "agentinstruct",
        "sharegpt",
        "openai_messages",
        "alpaca",
        "specforge",
    } <= set(ADAPTERS)
    with pytest.raises(ConfigError) as e:
        get_adapter("infinity")
    assert "infinity_instruct" in e.value.hint and "webinstructsub" in e.value.hint


def test_infinity_instruct_labels_langdetect_and_multiturn(fixtures):
    recs, bad = load(fixtures, "infinity_instruct", "infinity_instruct_0625.jsonl")
    assert bad == {9: "no user turn", 10: "no user turn"}
    assert recs[1].meta["domain"] == "math" and recs[1].meta["domain_reason"].startswith("label:")
    assert recs[2].meta["domain"] == "code"
    assert recs[3].meta["domain"] == "stem" and recs[3].meta["lang"] == "zh"
    # langdetect said "de" for English code; it is kept for reference but not trusted
    assert recs[2].meta["langdetect"] == "de" and recs[2].meta["lang"] == "en"
    assert recs[5].meta["lang"] == "fr"
    assert recs[6].meta["domain"] == "math" and recs[6].meta["domain_reason"] == "heuristic:math"
    assert recs[11].meta["domain"] == "other"
    # multi-turn: the earlier assistant turn keeps its place, the last answer is removed
    roles = [m["role"] for m in recs[4].messages]
    assert roles == ["user", "assistant", "user"]
    assert recs[4].meta["answers_removed"] == 1
    assert recs[0].meta["license"] == "cc-by-sa-4.0" and recs[0].meta["original_id"] == "1000"
    assert all(r.messages[-1]["role"] != "assistant" for r in recs.values())


def test_webinstructsub_sources_and_noncommercial_license(fixtures):
    recs, bad = load(fixtures, "webinstructsub", "webinstructsub.jsonl")
    assert bad == {4: "empty question"}
    assert recs[0].meta["domain"] == "math" and recs[0].meta["upstream"] == "mathstackexchange"
    assert recs[1].meta["license"] == "cc-by-nc-4.0" and recs[1].meta["commercial_use"] == "no"
    assert recs[2].meta["license"] == "apache-2.0" and recs[2].meta["domain"] == "stem"
    assert recs[0].messages == [{"role": "user", "content": "How can we prove that $\\sqrt{2}$ is irrational?"}]


def test_codefeedback_lang_is_the_programming_language(fixtures):
    recs, bad = load(fixtures, "codefeedback", "codefeedback_filtered_instruction.jsonl")
    assert bad == {5: "empty query"}
    assert recs[1].meta["programming_language"] == "sql" and recs[1].meta["lang"] == "en"
    assert {r.meta["domain"] for r in recs.values()} == {"code"}
    assert all(len(r.messages) == 1 for r in recs.values())


def test_metamathqa_groups_by_original_question(fixtures):
    recs, _ = load(fixtures, "metamathqa", "metamathqa.json")
    keys = [r.meta["original_question_hash"] for r in recs.values()]
    assert len(set(keys[:6])) == 1 and keys[6] != keys[0]
    assert recs[0].meta["augmentation"] == "GSM_AnsAug" and recs[0].meta["domain"] == "math"


def test_hermes_tools_become_json_and_role_order_is_fixed(fixtures):
    recs, bad = load(fixtures, "hermes_function_calling", "hermes_func_calling_singleturn.json")
    assert bad == {4: "unparsable tool schema"}
    weather = recs[0].tools[0]
    assert weather["function"]["name"] == "get_weather"
    # Python repr True became JSON true, and the record serializes as plain JSON
    assert weather["function"]["parameters"]["properties"]["metric"]["default"] is True
    assert json.loads(json.dumps(recs[1].tools))[1]["function"]["parameters"]["properties"]["limit"]["default"] is None
    assert [t["function"]["name"] for t in recs[2].tools] == ["convert_currency", "get_rate"]  # bare dicts, no list
    sys0 = recs[0].messages[0]
    assert sys0["role"] == "system" and "<tools>" not in sys0["content"] and "tool_call" not in sys0["content"]
    # wrong role order: human before system -> system first, recorded
    assert [m["role"] for m in recs[2].messages] == ["system", "user"]
    assert "system turn moved first" in recs[2].meta["fixes"]
    assert [m["role"] for m in recs[3].messages] == ["system", "user"]
    assert "assistant turn before the first user turn dropped" in recs[3].meta["fixes"]
    assert {r.meta["domain"] for r in recs.values()} == {"tool_use"}


def test_sharegpt_agent_loss_flags_and_bad_lines(fixtures):
    recs, bad = load(fixtures, "sharegpt", "agent_sharegpt.jsonl")
    assert bad == {3: "unknown speaker", 4: "invalid JSON"}
    os0 = recs[0]
    assert [m["role"] for m in os0.messages] == ["user", "assistant", "user", "assistant", "user"]
    assert os0.meta["loss"] == [None, False, None, True, None]
    assert recs[1].meta["loss"][-2] is True  # "true" string normalized
    assert [m["role"] for m in recs[2].messages] == ["user", "assistant", "tool"]  # observation -> tool
    assert recs[2].meta["loss"] == [False, False, None]
    assert {r.meta["domain"] for r in recs.values()} == {"agent"}


def test_openai_messages_tools_and_tool_calls(fixtures):
    recs, bad = load(fixtures, "openai_messages", "openai_messages.jsonl")
    assert bad == {2: "unknown role"}
    r = recs[0]
    assert isinstance(r.tools, list) and r.tools[0]["function"]["name"] == "book_table"
    call = r.messages[2]["tool_calls"][0]
    assert json.loads(call["function"]["arguments"]) == {"people": 2, "time": "19:00"}
    assert r.messages[-1] == {"role": "tool", "tool_call_id": "call_a", "content": '{"ok": true}'}
    assert r.meta["domain"] == "agent"
    # text parts joined by a newline, as vLLM joins them when it serves the same message
    assert recs[1].messages == [{"role": "user", "content": "Tell me a joke \nabout cats."}]


def test_alpaca_and_specforge(fixtures):
    recs, bad = load(fixtures, "alpaca", "alpaca.json")
    assert bad == {2: "empty instruction"}
    assert (
        recs[0].messages[0]["content"] == "Translate the following sentence into French.\n\nThe weather is nice today."
    )
    assert recs[0].meta["domain"] == "other"
    recs, bad = load(fixtures, "specforge", "specforge.jsonl")
    assert not bad
    assert [m["role"] for m in recs[1].messages] == ["system", "user", "assistant", "user"]
