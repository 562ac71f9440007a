"""The files of an output directory: the whole job's journal and one per shard (`.shard-i-of-N`)."""

from __future__ import annotations

import re

# The error files: errors.jsonl and one per shard (not the archived retried ones).
ERROR_FILES = re.compile(r"^errors(\.shard-\d+-of-\d+)?\.jsonl$")
STATS_FILES = re.compile(r"^stats(\.shard-\d+-of-\d+)?\.json$")


def journal_names(suffix: str = "") -> tuple[str, str, str]:
    """The results, errors and key index file names of one journal ('' suffix: the whole job's)."""
    return f"results{suffix}.jsonl", f"errors{suffix}.jsonl", f"results{suffix}.keys"
