"""The prompt record (DESIGN "Contracts"): what `mix` writes and `generate` reads; one class for both."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ROLES = ("system", "user", "assistant", "tool")

# ShareGPT speaker names (lower case) and the OpenAI roles they mean. One table for `mix` and
# `generate`, so a file `mix` reads is never refused by `generate` for its speaker names.
SHAREGPT_ROLES = {
    "system": "system",
    "human": "user",
    "user": "user",
    "prompter": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "model": "assistant",
    "chatgpt": "assistant",
    "bing": "assistant",
    "bot": "assistant",
    "function_call": "assistant",
    "tool": "tool",
    "function": "tool",
    "observation": "tool",
    "function_response": "tool",
    "ipython": "tool",
}


class RecordError(ValueError):
    """This row cannot become a prompt record.

    `reason` is what `mix` counts per source (keep it a short category there); `detail` names the
    offending value. `generate` reports str(error) for the row's line.
    """

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(reason if not detail else f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def text_of(content: Any) -> str:
    """A turn's content as one string: OpenAI text parts joined by newlines (as vLLM joins them), None is empty.

    Records hold string content (the servers and the token counts read strings); an image or
    any other non-text part cannot be kept as text, so it is a RecordError naming the part.
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for i, p in enumerate(content):
            if isinstance(p, dict) and p.get("type") == "text":
                if not isinstance(p.get("text"), str):
                    raise RecordError("non-text content part", f"part {i} is a text part without a string `text`")
                parts.append(p["text"])
            elif isinstance(p, dict):
                raise RecordError("non-text content part", f"part {i} has type {p.get('type')!r}, only 'text' is read")
            else:
                raise RecordError(
                    "non-text content part", f"part {i} is a {type(p).__name__}, not a {{type: text}} object"
                )
        return "\n".join(parts)
    raise RecordError("content is not text", type(content).__name__)


@dataclass(slots=True)
class PromptRecord:
    """One prompt: OpenAI `messages`, optional OpenAI `tools`, and `meta` (source, domain, lang, ...)."""

    id: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    meta: dict[str, Any] | None = field(default_factory=dict)
    line: int | None = None  # where `generate` read it, for error messages

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "messages": self.messages}
        if self.tools:
            out["tools"] = self.tools
        out["meta"] = self.meta
        return out

    def turns_to_generate(self) -> int:
        """Assistant turns to regenerate: each recorded one, plus one at the end if the last is not assistant."""
        n = sum(1 for m in self.messages if m["role"] == "assistant")
        return n + (self.messages[-1]["role"] != "assistant")

    def user_text(self) -> str:
        """The user turns joined; what dedup and language detection look at."""
        return "\n".join(m["content"] for m in self.messages if m["role"] == "user")


def validate_prompt_record(obj: Any) -> list[str]:
    """Every way `obj` breaks the prompt-record contract; empty when it is a valid record."""
    problems: list[str] = []
    if not isinstance(obj, dict):
        return [f"record is a {type(obj).__name__}, not an object"]
    if not isinstance(obj.get("id"), str) or not obj["id"]:
        problems.append("id must be a non-empty string")
    msgs = obj.get("messages")
    if not isinstance(msgs, list) or not msgs:
        problems.append("messages must be a non-empty list")
        msgs = []
    for i, m in enumerate(msgs):
        if not isinstance(m, dict):
            problems.append(f"messages[{i}] is not an object")
            continue
        if m.get("role") not in ROLES:
            problems.append(f"messages[{i}].role {m.get('role')!r} is not one of {', '.join(ROLES)}")
        if not isinstance(m.get("content"), str):
            problems.append(f"messages[{i}].content must be a string")
        if "tool_calls" in m and (m.get("role") != "assistant" or not isinstance(m["tool_calls"], list)):
            problems.append(f"messages[{i}].tool_calls must be a list on an assistant turn")
    if msgs and isinstance(msgs[-1], dict) and msgs[-1].get("role") == "assistant":
        problems.append("the last message is an assistant turn: nothing left to generate")
    if msgs and not any(isinstance(m, dict) and m.get("role") == "user" for m in msgs):
        problems.append("no user turn")
    tools = obj.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            problems.append("tools must be a list")
        else:
            for i, t in enumerate(tools):
                fn = t.get("function") if isinstance(t, dict) else None
                if not isinstance(t, dict) or t.get("type") != "function" or not isinstance(fn, dict):
                    problems.append(f"tools[{i}] is not an OpenAI function tool")
                elif not isinstance(fn.get("name"), str):
                    problems.append(f"tools[{i}].function.name must be a string")
    if "meta" in obj and not isinstance(obj["meta"], dict):
        problems.append("meta must be an object")
    return problems
