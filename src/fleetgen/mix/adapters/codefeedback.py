"""m-a-p/CodeFeedback-Filtered-Instruction: `query`, `answer`, `resource`, `lang`.

Quirk: `lang` is the programming language (python, sql, ...), not the natural language; it is
kept as meta.programming_language and the natural language is detected from the query.
License: apache-2.0 on the dataset card.
"""

from __future__ import annotations

from typing import Any

from fleetgen.mix.adapters.base import Adapter, Converted
from fleetgen.rows.prompt import RecordError, text_of


class CodeFeedback(Adapter):
    name = "codefeedback"
    description = "m-a-p/CodeFeedback-Filtered-Instruction: coding queries"
    required_columns = ("query",)
    license = "apache-2.0"

    def convert(self, row: dict[str, Any]) -> Converted:
        q = text_of(row["query"]).strip()
        if not q:
            raise RecordError("empty query")
        return Converted(
            [{"role": "user", "content": q}],
            source_domain=("code", "label:dataset"),
            extra={"upstream": row.get("resource"), "programming_language": row.get("lang")},
        )
