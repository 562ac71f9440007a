"""The (id, sample) key at the head of a journal line: how a line is written and read back without a parse, apart as
both the journal and the done-set read need it."""

from __future__ import annotations

import re
from typing import Any

import orjson

# Records are written with "id" then "sample" first, so the key is read without parsing the whole line.
# The id's string is written unrolled ("[^"\\]*(?:\\.[^"\\]*)*", not "(?:[^"\\]|\\.)*"): the same
# strings, matched faster by Python's regex engine (BENCHMARKS.md, "scale: the client's ceiling").
KEY_RE = re.compile(rb'^\{"id":("[^"\\]*(?:\\.[^"\\]*)*"|null),"sample":(\d+|null)')


def key_of(line: bytes) -> tuple[str | None, int | None, dict[str, Any] | None]:
    """The line's id and sample, and the parsed record when the head did not match KEY_RE (else None)."""
    m = KEY_RE.match(line)
    if m:
        rid = orjson.loads(m.group(1))
        sample = None if m.group(2) == b"null" else int(m.group(2))
        return rid, sample, None
    rec = orjson.loads(line)
    return rec.get("id"), rec.get("sample"), rec


def dumps_line(record: dict[str, Any]) -> bytes:
    """One JSONL line; records must start with "id" and "sample" (see KEY_RE)."""
    return orjson.dumps(record) + b"\n"
