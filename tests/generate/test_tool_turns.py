"""The coherence rule of tool turns (generate/turns/tool_turns.py), case by case, without a server."""

from __future__ import annotations

import json

from fleetgen.generate.turns.tool_turns import answered_call, call_arguments, follow_up


def call(name, args, cid=None):
    c = {
        "type": "function",
        "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)},
    }
    if cid:
        c["id"] = cid
    return c


def result(cid, text):
    return {"role": "tool", "content": text, **({"tool_call_id": cid} if cid else {})}


PARIS, ROME = {"city": "Paris"}, {"city": "Rome"}
REC = {
    "role": "assistant",
    "content": "",
    "tool_calls": [call("get_weather", PARIS, "c1"), call("get_weather", ROME, "c2")],
}
RESULTS = [result("c1", "sunny"), result("c2", "rain")]


def test_arguments_compare_as_json_not_text():
    assert call_arguments(call("f", '{"b": 1,  "a": [1, 2]}')) == call_arguments(call("f", '{"a":[1,2],"b":1}'))
    assert call_arguments(call("f", "not json")) == "not json"
    assert call_arguments(call("f", "")) == {}


def test_parallel_calls_in_another_order_keep_both_results_in_the_targets_order():
    made = [call("get_weather", ROME, "srv-a"), call("get_weather", '{"city":  "Paris"}', "srv-b")]
    f = follow_up(REC, RESULTS, made, match="arguments", more_follows=True)
    assert f.cut is None
    assert [c["id"] for c in f.calls] == ["c2", "c1"]  # each regenerated call takes its recorded twin's id
    # The k-th result answers the k-th call: a positional template pairs them so.
    assert f.results == [RESULTS[1], RESULTS[0]] and f.dropped == []
    assert [r["tool_call_id"] for r in f.results] == [c["id"] for c in f.calls]


def test_arguments_compare_with_their_json_types():
    flag = {"role": "assistant", "content": "", "tool_calls": [call("set", {"on": True, "n": 1}, "c1")]}
    res = [result("c1", "done")]
    assert (
        follow_up(flag, res, [call("set", {"on": 1, "n": 1})], match="arguments", more_follows=True).cut.reason
        == "other_arguments"
    )
    assert (
        follow_up(flag, res, [call("set", {"on": True, "n": True})], match="arguments", more_follows=True).cut.reason
        == "other_arguments"
    )
    assert follow_up(flag, res, [call("set", {"on": True, "n": 1.0})], match="arguments", more_follows=True).cut is None
    assert follow_up(flag, res, [call("set", '{"n": 1, "on": true}')], match="arguments", more_follows=True).cut is None
    # A JSON string is not the non-JSON text that spells it.
    text = {"role": "assistant", "content": "", "tool_calls": [call("f", "abc", "c1")]}
    assert (
        follow_up(text, res, [call("f", '"abc"')], match="arguments", more_follows=True).cut.reason == "other_arguments"
    )


def test_among_equal_recorded_calls_one_with_a_result_is_taken():
    rec = {
        "role": "assistant",
        "content": "",
        "tool_calls": [call("get_weather", PARIS, "c1"), call("get_weather", PARIS, "c2")],
    }
    f = follow_up(
        rec, [result("c2", "sunny")], [call("get_weather", PARIS, "srv")], match="arguments", more_follows=True
    )
    assert f.cut is None and f.calls[0]["id"] == "c2" and f.results == [result("c2", "sunny")]
    # Twice: the second has no result left, and says so.
    f = follow_up(
        rec,
        [result("c2", "sunny")],
        [call("get_weather", PARIS), call("get_weather", PARIS)],
        match="arguments",
        more_follows=True,
    )
    assert f.cut.reason == "no_recorded_result"


def test_name_policy_takes_argument_twins_first():
    made = [call("get_weather", {"city": "Lima"}, "s0"), call("get_weather", PARIS, "s1")]
    f = follow_up(REC, RESULTS, made, match="name", more_follows=True)
    # Paris keeps Paris's result; Lima gets the one left (Rome's), as the name policy allows.
    assert f.cut is None and [c["id"] for c in f.calls] == ["c2", "c1"]
    assert [r["content"] for r in f.results] == ["rain", "sunny"]


def test_results_without_ids_take_the_id_of_the_call_they_answer():
    rec = {"role": "assistant", "content": "", "tool_calls": [call("a", {}), call("b", {})]}
    f = follow_up(
        rec,
        [result(None, "A"), result(None, "B")],
        [call("b", {}, "srv-0"), call("a", {}, "srv-1")],
        match="arguments",
        more_follows=True,
    )
    assert [(r["content"], r["tool_call_id"]) for r in f.results] == [("B", "srv-0"), ("A", "srv-1")]
    f = follow_up(
        rec,
        [result(None, "A"), result(None, "B")],
        [call("b", {}), call("a", {})],
        match="arguments",
        more_follows=True,
    )
    assert [r["content"] for r in f.results] == ["B", "A"] and all("tool_call_id" not in r for r in f.results)


def test_a_second_result_for_one_call_is_dropped():
    f = follow_up(
        REC, [RESULTS[0], result("c1", "again")], [call("get_weather", PARIS)], match="arguments", more_follows=True
    )
    assert f.results == [RESULTS[0]] and f.dropped == [result("c1", "again")]


def test_a_subset_of_the_parallel_calls_keeps_only_their_results():
    f = follow_up(REC, RESULTS, [call("get_weather", PARIS, "x")], match="arguments", more_follows=True)
    assert f.cut is None and f.results == [RESULTS[0]] and f.dropped == [RESULTS[1]]


def test_answer_without_a_call_cuts_and_drops_the_results():
    f = follow_up(REC, RESULTS, None, match="arguments", more_follows=True)
    assert f.cut.reason == "answered_without_call" and f.results == [] and f.dropped == RESULTS
    assert "get_weather" in f.cut.detail


def test_another_function_and_other_arguments_cut():
    f = follow_up(REC, RESULTS, [call("get_time", {"tz": "UTC"})], match="arguments", more_follows=True)
    assert f.cut.reason == "other_function" and f.results == []
    f = follow_up(REC, RESULTS, [call("get_weather", {"city": "London"})], match="arguments", more_follows=True)
    assert f.cut.reason == "other_arguments" and "London" in f.cut.detail


def test_name_policy_accepts_other_arguments_but_not_another_function():
    f = follow_up(REC, RESULTS, [call("get_weather", {"city": "London"})], match="name", more_follows=True)
    assert f.cut is None and f.results == [RESULTS[0]] and f.calls[0]["id"] == "c1"
    f = follow_up(REC, RESULTS, [call("get_time", {})], match="name", more_follows=True)
    assert f.cut.reason == "other_function"


def test_a_call_twice_needs_two_recorded_twins():
    made = [call("get_weather", PARIS), call("get_weather", PARIS)]
    f = follow_up(REC, RESULTS, made, match="arguments", more_follows=True)
    assert f.cut.reason == "other_arguments"


def test_a_call_without_a_recorded_result_cuts():
    f = follow_up(
        REC, [RESULTS[0]], [call("get_weather", PARIS), call("get_weather", ROME)], match="arguments", more_follows=True
    )
    assert f.cut.reason == "no_recorded_result" and "Rome" in f.cut.detail


def test_a_result_answering_no_recorded_call_is_dropped():
    orphan = result("c9", "stale")
    f = follow_up(REC, [RESULTS[0], orphan], [call("get_weather", PARIS)], match="arguments", more_follows=True)
    assert f.cut is None and f.results == [RESULTS[0]] and f.dropped == [orphan]


def test_results_without_ids_answer_calls_by_position():
    rec = {"role": "assistant", "content": "", "tool_calls": [call("a", {}), call("b", {})]}
    assert answered_call([result(None, "1"), result(None, "2"), result(None, "3")], rec["tool_calls"]) == [0, 1, None]
    # Ids on one side only: position decides; an id no recorded call has answers nothing.
    assert answered_call([result("x", "1"), result("y", "2")], rec["tool_calls"]) == [0, 1]
    assert answered_call([result(None, "1"), result("c9", "2")], REC["tool_calls"]) == [0, None]
    f = follow_up(rec, [result(None, "1"), result(None, "2")], [call("b", {})], match="arguments", more_follows=False)
    assert f.cut is None and f.results == [result(None, "2")]  # neither call has an id: none is invented


def test_a_call_where_the_record_answered_cuts_only_if_the_record_goes_on():
    answered = {"role": "assistant", "content": "It is sunny."}
    f = follow_up(answered, [], [call("get_weather", PARIS)], match="arguments", more_follows=True)
    assert f.cut.reason == "unrecorded_call"
    # The last turn: the row ends on the target's call and nothing recorded is lost, so no cut.
    assert follow_up(answered, [], [call("get_weather", PARIS)], match="arguments", more_follows=False).cut is None
    assert follow_up(None, [], [call("get_weather", PARIS)], match="arguments", more_follows=False).cut is None


def test_an_answer_where_the_record_answered_is_the_plain_case():
    f = follow_up({"role": "assistant", "content": "x"}, [], None, match="arguments", more_follows=True)
    assert f.cut is None and f.calls is None and f.results == [] and f.dropped == []
