"""The vocabulary `mix` and `generate` share: ShareGPT speakers, text content, the row error."""

from __future__ import annotations

import pytest

from fleetgen.mix.adapters._chat import sharegpt_turns
from fleetgen.rows.prompt import SHAREGPT_ROLES, RecordError, text_of

# Every speaker the two separate maps knew before they were merged: dropping one breaks real files.
OLD_GENERATE = {
    "system": "system",
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "chatgpt": "assistant",
    "bing": "assistant",
    "tool": "tool",
    "observation": "tool",
    "function_response": "tool",
}
OLD_MIX = {
    "human": "user",
    "user": "user",
    "prompter": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "model": "assistant",
    "chatgpt": "assistant",
    "bot": "assistant",
    "function_call": "assistant",
    "system": "system",
    "tool": "tool",
    "function": "tool",
    "observation": "tool",
    "function_response": "tool",
    "ipython": "tool",
}


def test_sharegpt_roles_is_the_union_of_both_old_maps():
    assert SHAREGPT_ROLES == {**OLD_GENERATE, **OLD_MIX}


def test_mix_reads_a_speaker_only_generate_knew():
    turns = sharegpt_turns([{"from": "human", "value": "q"}, {"from": "bing", "value": "a"}])
    assert [t["role"] for t in turns] == ["user", "assistant"]


@pytest.mark.parametrize(
    "content, text",
    [
        (None, ""),
        ("plain", "plain"),
        ([], ""),
        ([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}], "a\nb"),  # vLLM joins parts so
    ],
)
def test_text_of_joins_text_parts(content, text):
    assert text_of(content) == text


@pytest.mark.parametrize(
    "content, reason, detail",
    [
        (
            [{"type": "text", "text": "x"}, {"type": "image_url", "image_url": {"url": "u"}}],
            "non-text content part",
            "part 1 has type 'image_url', only 'text' is read",
        ),
        (["bare"], "non-text content part", "part 0 is a str, not a {type: text} object"),
        ([{"type": "text", "text": 3}], "non-text content part", "part 0 is a text part without a string `text`"),
        (5, "content is not text", "int"),
        ({"type": "text", "text": "x"}, "content is not text", "dict"),
    ],
)
def test_text_of_refuses_what_is_not_text(content, reason, detail):
    with pytest.raises(RecordError) as e:
        text_of(content)
    assert (e.value.reason, e.value.detail) == (reason, detail)
    assert str(e.value) == f"{reason}: {detail}"


def test_record_error_is_a_value_error_and_reason_alone_reads_plain():
    e = RecordError("empty query")
    assert isinstance(e, ValueError) and str(e) == "empty query" and e.detail == ""
