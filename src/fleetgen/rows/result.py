"""The result and error rows of an output directory: the one schema generate writes and export and report read.

One JSON object a line in results*.jsonl / errors*.jsonl, "id" then "sample" first (the journal
reads the key without parsing the line). A row records what the target did: the messages with
each regenerated assistant turn as it answered, the parameters its first turn sent, the token
ids it was fed and sampled (rows/token_ids.py), and where fleetgen could not know, why not.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

FailureKind = Literal["input", "rejected", "failed", "truncated", "incomplete", "internal"]


class Usage(TypedDict):
    prompt_tokens: int  # summed over the sample's regenerated turns, as the server counted them
    completion_tokens: int


class Cut(TypedDict):
    """Where a sample ends early at the target's own turn (a tool call no recorded result answers, ...)."""

    turn: int  # the regenerated assistant turn the sample ends at (0-based)
    message: int  # its index in `messages`
    reason: str  # turns/tool_turns.py CutReason
    detail: str
    recorded_messages_dropped: int  # what the prompt held after it, not kept


class Timing(TypedDict):
    started_at: float  # unix seconds
    latency_s: float  # the whole sample, every turn


class ResultRow(TypedDict, total=False):
    """A sample whose every assistant turn was regenerated (or cut where the target's turn ends it)."""

    id: str
    sample: int
    messages: list[dict[str, Any]]  # the conversation as regenerated: prompt turns, then the target's
    tools: list[dict[str, Any]] | None
    meta: dict[str, Any] | None  # the prompt row's own, carried through
    finish_reason: str | None  # the last turn's
    truncated: bool  # a turn hit its token budget
    cut: Cut | None
    dropped_tool_results: int  # recorded tool results that answered no call the target made
    usage: Usage
    replica: str | list[str]  # the endpoint(s) that answered
    model: str
    profile: str  # the sampling profile's name, when the job has profiles
    sampling: dict[str, Any]  # what the first turn sent, plus the job's policies (generate/config/profiles.py)
    timing: Timing
    token_ids: dict[str, Any]  # rows/token_ids.py: {"encoding", "turns", "why"}
    job: str  # the digest of the job identity that made the row (rows/history.py)


class ErrorRow(TypedDict, total=False):
    """A sample (or, with sample null, a whole prompt row) that could not be done; a later run may retry it."""

    id: str | None
    sample: int | None
    line: int | None  # the prompt file's line
    kind: FailureKind
    reason: str
    job: str
