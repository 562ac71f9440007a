"""Which replica already holds a prompt's leading text: routing by shared prefix across prompts.

Affinity (a pin per prompt id) keeps the samples of one prompt together. Function-calling and
agent sources share a few long system prompts and tool schemas across thousands of prompts;
an engine's prefix cache reuses them only if those prompts reach the replica that has them.

A prompt's prefix is summarised without a tokenizer: its leading text (the system messages, then
the tools' JSON, then the other messages: the order chat templates put them in) is cut into
BLOCK_CHARS-character blocks, and block i is named by a hash chained over blocks 0..i, so one
hash stands for the whole text up to it. A bounded LRU map sends block hashes to the replica that
was last given them; the longest block of a prompt found in the map names its home.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

import orjson

BLOCK_CHARS = 256  # about 64 tokens of English or JSON
MAX_BLOCKS = 128  # the first 32K characters decide; the rest of a long prompt costs nothing
MIN_BLOCKS = 2  # a shared prefix shorter than this (a one-line system prompt) is not worth a detour
MAX_ENTRIES = 1 << 16  # block hashes remembered (a few MB)

V = TypeVar("V")


def leading_text(messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None, limit: int) -> str:
    """System messages, the tools' JSON, then the rest, up to `limit` characters."""
    parts: list[str] = []
    size = 0
    rest = 0
    for i, m in enumerate(messages):
        if m.get("role") != "system":
            rest = i
            break
        parts.append(str(m.get("content") or ""))
        size += len(parts[-1])
    else:
        rest = len(messages)
    if tools and size < limit:
        parts.append(orjson.dumps(tools).decode())
        size += len(parts[-1])
    for m in messages[rest:]:
        if size >= limit:
            break
        parts.append(f"\n{m.get('role')}\n{m.get('content') or ''}")
        size += len(parts[-1])
    return "".join(parts)[:limit]


def prefix_blocks(messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None = None) -> tuple[int, ...]:
    """Chained hashes of the whole blocks of a prompt's leading text (a trailing partial block is left out)."""
    text = leading_text(messages, tools, BLOCK_CHARS * MAX_BLOCKS)
    out = []
    h = 0
    for start in range(0, len(text) - BLOCK_CHARS + 1, BLOCK_CHARS):
        h = hash((h, text[start : start + BLOCK_CHARS]))
        out.append(h)
    return tuple(out)


class PrefixMap(Generic[V]):
    """Block hash -> the value (a replica) last given it, least recently used dropped first."""

    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self.max_entries = max_entries
        self._map: OrderedDict[int, V] = OrderedDict()

    def __len__(self) -> int:
        return len(self._map)

    def longest(self, blocks: Sequence[int]) -> tuple[V, int] | None:
        """(value, blocks matched) for the deepest of `blocks` in the map, if at least MIN_BLOCKS deep."""
        get = self._map.get
        for depth in range(len(blocks), MIN_BLOCKS - 1, -1):
            v = get(blocks[depth - 1])
            if v is not None:
                return v, depth
        return None

    def record(self, blocks: Sequence[int], value: V, *, take_over: bool) -> None:
        """`value` now holds these blocks: new ones are its; known ones too if `take_over`, else only refreshed.

        Without take_over, a prompt sent elsewhere for balance leaves its shared prefix's home where it was
        (the overflow replica learns the prefix too, but the home keeps drawing the prompts that share it).
        """
        m = self._map
        for b in blocks:
            if take_over or b not in m:
                m[b] = value
            m.move_to_end(b)
        while len(m) > self.max_entries:
            m.popitem(last=False)
