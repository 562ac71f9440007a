"""TIGER-Lab/WebInstructSub: `question`, `answer`, `source`, `index` (plus orig_question/orig_answer).

License: apache-2.0 on the dataset card. Quirk: rows from `source: socratic` come from socratic.org
under a non-commercial license; the license is recorded per row (meta.license, and from it
meta.commercial_use) so the report lists it and `filters.exclude_noncommercial` can drop it.
"""

from __future__ import annotations

from typing import Any

from fleetgen.mix.adapters.base import Adapter, Converted
from fleetgen.rows.prompt import RecordError, text_of

# upstream source -> (domain, license)
SOURCES = {
    "mathstackexchange": ("math", "apache-2.0"),
    "stackexchange": ("stem", "apache-2.0"),
    "socratic": ("stem", "cc-by-nc-4.0"),
}


class WebInstructSub(Adapter):
    name = "webinstructsub"
    description = "TIGER-Lab/WebInstructSub: question/answer pairs from StackExchange and Socratic"
    required_columns = ("question", "source")
    license = "apache-2.0"

    def convert(self, row: dict[str, Any]) -> Converted:
        q = text_of(row["question"]).strip()
        if not q:
            raise RecordError("empty question")
        upstream = str(row.get("source") or "").strip().lower()
        domain, lic = SOURCES.get(upstream, ("stem", self.license))
        extra = {"upstream": upstream or None}
        rid = row.get("index")
        return Converted(
            [{"role": "user", "content": q}],
            original_id=None if rid is None else str(rid),
            license=lic,
            source_domain=(domain, f"label:source={upstream or '?'}"),
            extra=extra,
        )
