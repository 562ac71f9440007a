"""meta-math/MetaMathQA: `query`, `response`, `type`, `original_question`.

Quirk: the augmentations repeat one original question many times (AnsAug rows carry the same
query with different answers; Rephrased/SV/FOBAR rows rewrite it). `original_question` is the
group key that the source's `max_per_original_question` caps; identical AnsAug queries are
also exact duplicates once the answers are removed. License: mit on the dataset card (it read
apache-2.0, then cc-by-nc-4.0, before mit in 2023).
"""

from __future__ import annotations

import hashlib
from typing import Any

from fleetgen.mix.adapters.base import Adapter, Converted
from fleetgen.rows.prompt import RecordError, text_of


class MetaMathQA(Adapter):
    name = "metamathqa"
    description = "meta-math/MetaMathQA: augmented GSM8K/MATH questions"
    required_columns = ("query", "original_question")
    license = "mit"
    has_original_question = True

    def convert(self, row: dict[str, Any]) -> Converted:
        q = text_of(row["query"]).strip()
        if not q:
            raise RecordError("empty query")
        orig = text_of(row.get("original_question")).strip()
        key = hashlib.blake2b(orig.encode(), digest_size=8).hexdigest() if orig else None
        return Converted(
            [{"role": "user", "content": q}],
            source_domain=("math", "label:dataset"),
            group_key=key,
            extra={"augmentation": row.get("type"), "original_question_hash": key},
        )
