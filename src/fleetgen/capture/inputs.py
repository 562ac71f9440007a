"""What capture computes over for each result record: the export's token rows, from the recorded ids.

One way to build token rows: export's TokensFormat (export/formats/tokens.py). A record whose every
regenerated turn recorded the server's ids becomes rows of exactly those ids (the prompt as fed and
each sampled turn; a new row only where a later prompt does not extend the earlier ids), loss mask 1 on
the sampled ids. A record without them takes its text path (the rendered conversation, re-tokenized,
checked by a round trip) and the item says so (`ids_from` "text" and why), so the journal can count it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetgen.export.config import ExportConfig
from fleetgen.export.formats.base import RowRejected
from fleetgen.export.formats.tokens import TokensFormat
from fleetgen.export.results import ReadCounts, iter_results, job_reasoning

RECORDED, TEXT = "recorded", "text"


@dataclass(frozen=True)
class TokenRow:
    """One sequence to run the target over: its ids and loss mask (1 where the target sampled the token)."""

    input_ids: list[int]
    loss_mask: list[int]


@dataclass(frozen=True)
class CaptureItem:
    """One result record's rows, keyed by its (id, sample); `ids_from` is recorded or text, `why` says why text."""

    id: str
    sample: int
    rows: list[TokenRow]
    ids_from: str
    why: str | None = None

    @property
    def tokens(self) -> int:
        return sum(len(r.input_ids) for r in self.rows)


@dataclass(frozen=True)
class Rejected:
    """A record with no rows: its text path failed (a template that cannot round-trip it)."""

    id: str
    sample: int
    reason: str


def token_format(results_dir: Path, tokenizer: Any, max_length: int | None = None) -> TokensFormat:
    """The export's tokens format as capture uses it: reasoning kept and supervised, as generate recorded it."""
    cfg = ExportConfig(results_dir=results_dir, output=Path("capture.parquet"), format="tokens", max_length=max_length)
    fmt = TokensFormat(cfg, tokenizer)
    fmt.job_reasoning = job_reasoning(results_dir)
    return fmt


def item_of(fmt: TokensFormat, rec: dict[str, Any]) -> CaptureItem | Rejected:
    """A record's capture item, or why it has none."""
    rid, sample = str(rec.get("id")), int(rec.get("sample") or 0)
    try:
        rows = fmt.convert(rec)
    except RowRejected as e:
        return Rejected(rid, sample, e.reason)
    if not rows:
        return Rejected(rid, sample, "no token rows")
    text = rows[0]["ids_from"] == "text"
    return CaptureItem(
        rid,
        sample,
        [TokenRow(list(r["input_ids"]), list(r["loss_mask"])) for r in rows],
        TEXT if text else RECORDED,
        rows[0]["ids_reason"] if text else None,
    )


def iter_items(
    results_dir: Path, tokenizer: Any, skip: Any = None, counts: ReadCounts | None = None, max_length: int | None = None
) -> Iterator[CaptureItem | Rejected]:
    """Each result record once, as an item, but those `skip(id, sample)` says are done (resume by key)."""
    fmt = token_format(results_dir, tokenizer, max_length)
    for rec in iter_results(results_dir, counts):
        if skip is not None and skip(str(rec.get("id")), int(rec.get("sample") or 0)):
            continue
        yield item_of(fmt, rec)
