"""Normalization of OpenAI, SpecForge and ShareGPT rows, bad-row reasons, and streaming readers."""

from __future__ import annotations

import json
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fleetgen.generate.prompts.reader import BadRow, PromptRecord, fingerprint, normalize, read_prompts
from fleetgen.rows.prompt import RecordError


def test_openai_row_keeps_tools_meta_and_tool_messages():
    row = {
        "id": "a",
        "messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "u"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
            },
            {"role": "tool", "content": "42", "tool_call_id": "c1"},
            {"role": "assistant", "content": "done"},
        ],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
        "meta": {"domain": "code"},
    }
    rec = normalize(row, 7)
    assert rec.id == "a" and rec.line == 7 and rec.meta == {"domain": "code"}
    assert rec.messages[2] == {"role": "assistant", "tool_calls": row["messages"][2]["tool_calls"], "content": ""}
    assert rec.messages[3] == {"role": "tool", "content": "42", "tool_call_id": "c1"}
    assert rec.tools == row["tools"]
    assert rec.turns_to_generate() == 2


def test_sharegpt_and_specforge_rows_normalize_to_openai_roles():
    share = normalize(
        {
            "id": "s",
            "conversations": [
                {"from": "system", "value": "x"},
                {"from": "human", "value": "hi"},
                {"from": "gpt", "value": "yo"},
            ],
        },
        1,
    )
    assert [m["role"] for m in share.messages] == ["system", "user", "assistant"]
    assert share.messages[1]["content"] == "hi"
    spec = normalize({"id": "f", "conversations": [{"role": "user", "content": "q"}]}, 2)
    assert spec.messages == [{"role": "user", "content": "q"}]
    assert spec.turns_to_generate() == 1


def test_openai_text_parts_are_joined_in_place():
    row = {
        "id": "p",
        "messages": [
            {"role": "system", "content": [{"type": "text", "text": "be brief"}]},
            {
                "role": "user",
                "content": [{"type": "text", "text": "Tell me a joke"}, {"type": "text", "text": "about cats."}],
            },
            {"role": "assistant", "content": [{"type": "text", "text": "old answer"}]},
            {"role": "user", "content": "another"},
        ],
    }
    rec = normalize(row, 1)
    # strict: nothing reordered or dropped, the recorded assistant turn stays to be regenerated
    assert rec.messages == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "Tell me a joke\nabout cats."},
        {"role": "assistant", "content": "old answer"},
        {"role": "user", "content": "another"},
    ]
    assert rec.turns_to_generate() == 2
    share = normalize({"conversations": [{"from": "human", "value": [{"type": "text", "text": "hi"}]}]}, 1)
    assert share.messages == [{"role": "user", "content": "hi"}]


def test_an_image_part_is_a_row_error_naming_it(tmp_path):
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    row = {"id": "img", "messages": [{"role": "user", "content": [{"type": "text", "text": "what is this?"}, image]}]}
    with pytest.raises(RecordError, match=r"message 0 \(user\): non-text content part: part 1 has type 'image_url'"):
        normalize(row, 1)
    p = tmp_path / "p.jsonl"
    p.write_text(json.dumps(row) + "\n")
    (bad,) = read_prompts(p)
    assert isinstance(bad, BadRow) and bad.id == "img" and "'image_url'" in bad.reason
    with pytest.raises(RecordError, match="part 0 is a text part without a string `text`"):
        normalize({"messages": [{"role": "user", "content": [{"type": "text"}]}]}, 1)


@pytest.mark.parametrize(
    "turns, roles",
    [
        ([("prompter", "q")], ["user"]),
        ([("human", "q"), ("function_call", '{"name": "f"}'), ("ipython", "42")], ["user", "assistant", "tool"]),
        ([("human", "q"), ("model", "a"), ("function", "r"), ("Bot", "b")], ["user", "assistant", "tool", "assistant"]),
    ],
)
def test_sharegpt_speakers_mix_knows_are_read_by_generate(turns, roles):
    rec = normalize({"conversations": [{"from": f, "value": v} for f, v in turns]}, 1)
    assert [m["role"] for m in rec.messages] == roles


def test_missing_id_gets_a_stable_content_hash():
    a = normalize({"messages": [{"role": "user", "content": "q"}]}, 1)
    b = normalize({"messages": [{"role": "user", "content": "q"}]}, 9)
    assert a.id == b.id and a.id.startswith("h-")


@pytest.mark.parametrize(
    "row, reason",
    [
        ({"id": "e", "messages": []}, "empty conversation"),
        (
            {"id": "a", "messages": [{"role": "assistant", "content": "x"}, {"role": "user", "content": "y"}]},
            "must start with a user message",
        ),
        ({"id": "r", "messages": [{"role": "wizard", "content": "x"}]}, "unknown role 'wizard'"),
        (
            {"id": "c", "messages": [{"role": "user", "content": ["parts"]}]},
            "message 0 (user): non-text content part: part 0 is a str",
        ),
        (
            {"id": "c", "messages": [{"role": "user", "content": 5}]},
            "content must be a string or a list of text parts, got int",
        ),
        ({"id": "c", "messages": [{"role": "user", "content": {"type": "text", "text": "x"}}]}, "got dict"),
        ({"id": "c", "messages": [{"role": "user"}]}, "content must be a string or a list of text parts, got NoneType"),
        ({"id": "n", "prompt": "x"}, "no `messages`"),
        ({"id": "g", "conversations": [{"from": "alien", "value": "x"}]}, "unknown ShareGPT speaker"),
        ([1, 2], "must be a JSON object"),
        ({"id": "", "messages": [{"role": "user", "content": "x"}]}, "`id` must be a non-empty string"),
    ],
)
def test_bad_rows_say_what_is_wrong(row, reason):
    with pytest.raises(RecordError, match=re.escape(reason)):
        normalize(row, 1)


def test_jsonl_reader_streams_rows_and_names_bad_lines(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text(
        json.dumps({"id": "1", "messages": [{"role": "user", "content": "a"}]})
        + "\n"
        + "\n"
        + "{not json\n"
        + json.dumps({"id": "3", "messages": []})
        + "\n"
        + json.dumps({"id": "4", "messages": [{"role": "user", "content": "b"}]})  # no final newline
    )
    items = list(read_prompts(p))
    assert isinstance(items[0], PromptRecord) and items[0].line == 1
    assert isinstance(items[1], BadRow) and items[1].line == 3 and "malformed JSON" in items[1].reason
    assert isinstance(items[2], BadRow) and items[2].line == 4 and items[2].id == "3"
    assert isinstance(items[3], PromptRecord) and items[3].id == "4" and items[3].line == 5
    digest, rows = fingerprint(p)
    assert rows == 5 and len(digest) == 64
    p.write_text(p.read_text() + "\n")
    assert fingerprint(p)[0] != digest


def test_parquet_reader_drops_null_struct_fields(tmp_path):
    rows = [
        {"id": "a", "messages": [{"role": "user", "content": "q", "tool_call_id": None}]},
        {
            "id": "b",
            "messages": [
                {"role": "user", "content": "q2", "tool_call_id": None},
                {"role": "tool", "content": "r", "tool_call_id": "c"},
            ],
        },
    ]
    p = tmp_path / "p.parquet"
    pq.write_table(pa.Table.from_pylist(rows), p)
    items = list(read_prompts(p))
    assert [i.id for i in items] == ["a", "b"]
    assert items[0].messages == [{"role": "user", "content": "q"}]
    assert items[1].messages[1] == {"role": "tool", "content": "r", "tool_call_id": "c"}
    assert fingerprint(p)[1] == 2
