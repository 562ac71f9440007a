"""Prompt filters: length in tokens (estimated, or exact with a tokenizer), language, license."""

from __future__ import annotations

import json
from collections.abc import Callable

from fleetgen.errors import ConfigError
from fleetgen.mix.licenses import commercial_use
from fleetgen.mix.recipe import FilterSpec
from fleetgen.rows.prompt import PromptRecord


def estimate_tokens(text: str) -> int:
    """About one token per 4 ASCII characters and one per CJK/other character: no tokenizer needed.

    Close to BPE tokenizers on English prose and code (BENCHMARKS.md, "figures the code cites"); errs high
    on CJK, which is the safe side for a maximum-length filter.
    """
    n = len(text)
    ascii_n = len(text.encode("ascii", "ignore"))
    return (ascii_n + 3) // 4 + (n - ascii_n)


def token_counter(spec: FilterSpec) -> Callable[[str], int]:
    """The token counter the recipe asks for: a Hugging Face tokenizer, or the estimate."""
    if not spec.tokenizer:
        return estimate_tokens
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise ConfigError(
            "filters.tokenizer needs the transformers package",
            hint="pip install transformers, or drop filters.tokenizer",
        ) from None
    try:
        tok = AutoTokenizer.from_pretrained(spec.tokenizer)
    except Exception as e:  # transformers raises OSError, ValueError, HF hub errors...
        raise ConfigError(f"cannot load tokenizer {spec.tokenizer!r}: {e}") from None
    return lambda text: len(tok.encode(text, add_special_tokens=False))


def prompt_tokens(record: PromptRecord, count: Callable[[str], int]) -> int:
    """Tokens of every turn plus the tool definitions, which the chat template renders into the prompt."""
    n = sum(count(m["content"]) for m in record.messages)
    if record.tools:
        n += count(json.dumps(record.tools, ensure_ascii=False))
    return n


def filter_reason(record: PromptRecord, tokens: int, spec: FilterSpec) -> str | None:
    """Why the record is filtered out (a short category for the report), or None to keep it."""
    if spec.max_prompt_tokens is not None and tokens > spec.max_prompt_tokens:
        return "too long"
    if spec.languages:
        lang = record.meta.get("lang", "und")
        if lang == "und":
            if not spec.keep_undetermined_language:
                return "language undetermined"
        elif lang not in spec.languages:
            return "language"
    lic = record.meta.get("license")
    use = commercial_use(lic)
    if spec.require_license is not None and str(lic or "").lower() not in spec.require_license:
        return "license not in require_license"
    if spec.exclude_noncommercial and use == "no":
        return "non-commercial license"
    if spec.exclude_unknown_license and use == "unknown":
        return "license unknown"
    return None
