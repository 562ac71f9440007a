"""vllm-project/speculators' rows: what its response regeneration writes and its prepare_data passes through.

Fields as scripts/response_regeneration/script.py (`_sample_from_response`) writes them, one row
per target generation: `id` (`<conversation>_gen<k>`), `primary_id` (the conversation: here
`<prompt id>#<sample>`), `input_ids` = prompt ids + sampled ids, `loss_mask` 0 over the prompt and
1 over the sampled ids, `text` (decode of input_ids with special tokens, for review only) and
`metadata` {idx, finish_reason, is_tool_call, usage, endpoint, sampling_params}. Its loader
(src/speculators/data_generation/preprocessing.py, `build_speculator_training_dataset`) passes
rows that have `input_ids` and `loss_mask` through unchanged. fleetgen adds `prompt_id` and
`sample` to metadata; `idx` (speculators' row index in its source dataset) is null: fleetgen's
prompt ids are strings, carried in `primary_id`. speculators has no tools field: the tool definitions
and calls are in the ids, as the template rendered and the target sampled them.

Records without ids take the tokens format's text path (its rows split where the template
rewrites earlier turns), named as re-tokenized in the export summary; each row's metadata says which
(`ids_from`: `ids` or `text`, `ids_reason`: why text; see tokens.py).
"""

from __future__ import annotations

from typing import Any

from fleetgen.export.formats.base import Row, RowRejected
from fleetgen.export.formats.token_rows import IdRow, rows_per_generation
from fleetgen.export.formats.tokens import TokensFormat
from fleetgen.export.results import finish_reasons, row_id
from fleetgen.rows.token_ids import TurnIds


class SpeculatorsFormat(TokensFormat):
    name = "speculators"

    def id_rows(self, rec: dict[str, Any], turns: list[TurnIds]) -> list[Row]:
        close = self.think_close if self.config.reasoning == "context" else None
        assistants = [m for m in rec["messages"] if m.get("role") == "assistant"]
        rows = []
        for r in rows_per_generation(turns, close):
            t = turns[r.last_turn]
            usage = {
                "prompt_tokens": len(t.prompt),
                "completion_tokens": len(t.completion),
                "total_tokens": len(t.prompt) + len(t.completion),
            }
            rows.append(self._speculators_row(rec, r, assistants, usage))
        self._check_length(rows)
        return rows

    def text_rows(self, rec: dict[str, Any]) -> list[Row]:
        assistants = [m for m in rec["messages"] if m.get("role") == "assistant"]
        rows = []
        for row in super().text_rows(rec):
            last = int(row["id"].rpartition("/turn")[2]) if "/turn" in row["id"] else len(assistants) - 1
            r = IdRow(row["input_ids"], row["loss_mask"], last)
            rows.append(self._speculators_row(rec, r, assistants, None))
        return rows

    def provenance(self, rows: list[Row], source: str, reason: str | None) -> list[Row]:
        for row in rows:
            row["metadata"]["ids_from"], row["metadata"]["ids_reason"] = source, reason
        return rows

    def _check_length(self, rows: list[Row]) -> None:
        for row in rows:
            if self.config.max_length and len(row["input_ids"]) > self.config.max_length:
                raise RowRejected(f"longer than max_length {self.config.max_length}")

    def _speculators_row(self, rec: dict[str, Any], r: IdRow, assistants: list[dict[str, Any]], usage: Any) -> Row:
        conv = row_id(rec)
        finish = finish_reasons(rec)
        replica = rec.get("replica")
        endpoint = replica[r.last_turn] if isinstance(replica, list) and r.last_turn < len(replica) else replica
        message = assistants[r.last_turn] if r.last_turn < len(assistants) else {}
        return {
            "id": f"{conv}_gen{r.last_turn}",
            "primary_id": conv,
            "input_ids": r.input_ids,
            "loss_mask": r.loss_mask,
            "text": self.tok.decode(r.input_ids, skip_special_tokens=False),
            "metadata": {
                "idx": None,
                "finish_reason": finish[r.last_turn] if r.last_turn < len(finish) else None,
                "is_tool_call": bool(message.get("tool_calls")),
                # Exact per generation when ids were recorded (their lengths); the record's totals otherwise.
                "usage": usage if usage is not None else (rec.get("usage") or {}),
                "endpoint": endpoint,
                "sampling_params": rec.get("sampling") or {},
                "prompt_id": str(rec["id"]),
                "sample": int(rec.get("sample") or 0),
            },
        }
