"""Prompt records: normalizing OpenAI, SpecForge and ShareGPT rows, and streaming them from disk."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from fleetgen.errors import InputError
from fleetgen.rows.prompt import ROLES, SHAREGPT_ROLES, PromptRecord, RecordError, text_of


@dataclass(frozen=True)
class BadRow:
    """A row that cannot be a prompt; `id` is known when the row had a usable one."""

    line: int
    reason: str
    id: str | None = None


def normalize(row: Any, line: int) -> PromptRecord:
    """Turn one decoded row into a PromptRecord, or raise RecordError saying what is wrong."""
    if not isinstance(row, dict):
        raise RecordError(f"a row must be a JSON object, got {type(row).__name__}")
    if "messages" in row and row["messages"] is not None:
        raw = row["messages"]
        messages = _openai_messages(raw)
    elif "conversations" in row and row["conversations"] is not None:
        raw = row["conversations"]
        messages = _conversation_messages(raw)
    else:
        raise RecordError("no `messages` (OpenAI) or `conversations` (SpecForge/ShareGPT) field")
    _check_order(messages)
    tools = row.get("tools")
    if tools is not None:
        if isinstance(tools, str):
            tools = _json_field(tools, "tools")
        if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
            raise RecordError("`tools` must be a list of OpenAI tool definitions")
        tools = tools or None
    meta = row.get("meta")
    if meta is not None and not isinstance(meta, dict):
        raise RecordError("`meta` must be an object")
    rid = row.get("id")
    if rid is None:
        # No id: derive a stable one from the content so resume still works by id.
        rid = "h-" + hashlib.sha256(orjson.dumps(messages, option=orjson.OPT_SORT_KEYS)).hexdigest()[:20]
    elif isinstance(rid, int) and not isinstance(rid, bool):
        rid = str(rid)
    elif not isinstance(rid, str) or not rid:
        raise RecordError(f"`id` must be a non-empty string, got {rid!r}")
    return PromptRecord(id=rid, messages=messages, tools=tools, meta=meta, line=line)


def raw_id(row: Any) -> str | None:
    """The id `normalize` gives a row when it takes it as is (a non-empty str, or an int as str); else None."""
    rid = row.get("id") if type(row) is dict else None
    if type(rid) is str:  # type(), not isinstance, here and below: a bool is an int, and normalize refuses it
        return rid or None
    if type(rid) is int:
        return str(rid)
    return None  # no id (normalize hashes the content), or one it refuses


def surely_valid(row: dict[str, Any]) -> bool:
    """True only for a row that `normalize` accepts; False when unsure (the full path decides).

    A narrow, conservative subset: OpenAI `messages`, each a dict with a known role, string content
    and tool_calls absent or a list; a user turn first after system turns; tools a list of dicts, meta
    a dict. Anything else (SpecForge/ShareGPT rows, content parts, JSON-in-string fields) is unsure.
    """
    messages = row.get("messages")
    if type(messages) is not list:
        return False
    first = None
    for m in messages:
        if type(m) is not dict or type(m.get("content")) is not str or m.get("role") not in ROLES:
            return False
        tool_calls = m.get("tool_calls")
        if tool_calls is not None and type(tool_calls) is not list:
            return False
        if first is None and m["role"] != "system":
            first = m["role"]
    tools, meta = row.get("tools"), row.get("meta")
    return (
        first == "user"
        and (meta is None or type(meta) is dict)
        and (tools is None or (type(tools) is list and all(type(t) is dict for t in tools)))
    )


def _openai_messages(raw: Any) -> list[dict[str, Any]]:
    if not isinstance(raw, list):
        raise RecordError(f"`messages` must be a list, got {type(raw).__name__}")
    out = []
    for i, m in enumerate(raw):
        if not isinstance(m, dict):
            raise RecordError(f"message {i} must be an object, got {type(m).__name__}")
        out.append(_message(i, m.get("role"), m.get("content"), m))
    return out


def _conversation_messages(raw: Any) -> list[dict[str, Any]]:
    if not isinstance(raw, list):
        raise RecordError(f"`conversations` must be a list, got {type(raw).__name__}")
    out = []
    for i, m in enumerate(raw):
        if not isinstance(m, dict):
            raise RecordError(f"message {i} must be an object, got {type(m).__name__}")
        if "from" in m and "role" not in m:  # ShareGPT
            speaker = m.get("from")
            role = SHAREGPT_ROLES.get(speaker.strip().lower()) if isinstance(speaker, str) else None
            if role is None:
                raise RecordError(f"message {i}: unknown ShareGPT speaker {speaker!r}")
            out.append(_message(i, role, m.get("value"), {}))
        else:  # SpecForge: role/content
            out.append(_message(i, m.get("role"), m.get("content"), m))
    return out


def _message(i: int, role: Any, content: Any, src: dict[str, Any]) -> dict[str, Any]:
    if role not in ROLES:
        raise RecordError(f"message {i}: unknown role {role!r} (expected one of {', '.join(sorted(ROLES))})")
    msg: dict[str, Any] = {"role": role}
    tool_calls = src.get("tool_calls")
    if isinstance(tool_calls, str):
        tool_calls = _json_field(tool_calls, f"message {i} tool_calls")
    if tool_calls is not None and role == "assistant":
        if not isinstance(tool_calls, list):
            raise RecordError(f"message {i}: tool_calls must be a list")
        msg["tool_calls"] = tool_calls
    if content is None and "tool_calls" in msg:
        content = ""
    if isinstance(content, list):  # OpenAI content parts: text parts are joined, others refused
        try:
            content = text_of(content)
        except RecordError as e:
            raise RecordError(f"message {i} ({role}): {e}") from None
    if not isinstance(content, str):
        raise RecordError(
            f"message {i} ({role}): content must be a string or a list of text parts, got {type(content).__name__}"
        )
    msg["content"] = content
    for key in ("tool_call_id", "name"):
        value = src.get(key)
        if value is not None and role == "tool":
            msg[key] = value
    return msg


def _check_order(messages: list[dict[str, Any]]) -> None:
    if not messages:
        raise RecordError("empty conversation: no messages")
    first = next((m for m in messages if m["role"] != "system"), None)
    if first is None:
        raise RecordError("no user message (only system messages)")
    if first["role"] != "user":
        raise RecordError(f"conversation must start with a user message after system messages, got {first['role']!r}")


def _json_field(text: str, what: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as e:
        raise RecordError(f"{what} is a string that is not JSON: {e}") from None


def iter_rows(path: Path) -> Iterator[tuple[int, Any | BadRow]]:
    """Stream (line or row number from 1, decoded row or BadRow) from JSONL or Parquet, in file order."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"prompt file not found: {path}", hint="check the PROMPTS path")
    if path.suffix.lower() in (".parquet", ".pq"):
        yield from _iter_parquet(path)
    else:
        yield from _iter_jsonl(path)


def _iter_jsonl(path: Path) -> Iterator[tuple[int, Any | BadRow]]:
    with open(path, "rb") as f:
        for n, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            try:
                yield n, orjson.loads(raw)
            except orjson.JSONDecodeError as e:
                yield n, BadRow(n, f"malformed JSON: {e}")


def iter_rows_at(path: Path, offset: int = 0, line: int = 1) -> Iterator[tuple[int, Any | BadRow, int]]:
    """(line, row, byte offset where the line ends) of a JSONL file, from byte `offset` (where line `line` starts) on.

    The same rows as `iter_rows`, with the offsets a resume checkpoint records (watermark.py).
    """
    path = Path(path)
    if not path.exists():
        raise InputError(f"prompt file not found: {path}", hint="check the PROMPTS path")
    loads, decode_error = orjson.loads, orjson.JSONDecodeError
    with open(path, "rb") as f:
        f.seek(offset)
        end = offset
        for n, raw in enumerate(f, start=line):
            end += len(raw)
            if not raw.strip():
                continue
            try:
                yield n, loads(raw), end
            except decode_error as e:
                yield n, BadRow(n, f"malformed JSON: {e}"), end


def is_parquet(path: Path) -> bool:
    return Path(path).suffix.lower() in (".parquet", ".pq")


def _iter_parquet(path: Path) -> Iterator[tuple[int, Any | BadRow]]:
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except Exception as e:  # pyarrow raises several types for a bad file
        raise InputError(f"{path}: not a readable Parquet file: {e}") from None
    n = 0
    for batch in pf.iter_batches(batch_size=1024):
        for row in batch.to_pylist():
            n += 1
            yield n, _drop_nulls(row)


def _drop_nulls(value: Any) -> Any:
    """Parquet structs carry every field; a missing one reads as None and must not become a key."""
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


def read_prompts(path: Path) -> Iterator[PromptRecord | BadRow]:
    """Stream normalized records; bad rows come out as BadRow naming the line, in order."""
    for n, row in iter_rows(path):
        yield prompt_of(n, row)


def prompt_of(n: int, row: Any | BadRow) -> PromptRecord | BadRow:
    """One row from `iter_rows` as a normalized record, or a BadRow naming line `n` and what is wrong."""
    if isinstance(row, BadRow):
        return row
    try:
        return normalize(row, n)
    except RecordError as e:
        rid = row.get("id") if isinstance(row, dict) and isinstance(row.get("id"), str) else None
        return BadRow(n, str(e), rid)


def fingerprint(path: Path) -> tuple[str, int]:
    """(sha256 of the file's bytes, rows in it): the prompt set's identity, read in one streaming pass."""
    path = Path(path)
    h = hashlib.sha256()
    if path.suffix.lower() in (".parquet", ".pq"):
        import pyarrow.parquet as pq

        rows = pq.ParquetFile(path).metadata.num_rows
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        return h.hexdigest(), rows
    rows = 0
    last = b"\n"
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
            rows += chunk.count(b"\n")
            last = chunk[-1:]
    if last != b"\n":
        rows += 1
    return h.hexdigest(), rows
