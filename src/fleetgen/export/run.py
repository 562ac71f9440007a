"""`export`: result records -> filters -> format -> split -> files written atomically."""

from __future__ import annotations

from collections.abc import Callable
from typing import IO, Any

import orjson

from fleetgen.errors import MissingTokenIdsError
from fleetgen.export.atomic import AtomicFiles
from fleetgen.export.config import TOKEN_FORMATS, ExportConfig
from fleetgen.export.filters import rejection
from fleetgen.export.formats import TEXT_FORMATS, Format, RowRejected, SpeculatorsFormat, TokensFormat
from fleetgen.export.formats.tokens import load_tokenizer, parquet_schema, require_tokenizer
from fleetgen.export.results import ReadCounts, iter_results, job_reasoning
from fleetgen.export.split import split_of
from fleetgen.export.summary import ExportSummary

MAX_EXAMPLES = 5
PARQUET_BATCH = 512


def export(config: ExportConfig, *, on_row: Callable[[ExportSummary], None] | None = None) -> ExportSummary:
    """Write the training file(s) the config asks for; nothing is left half-written if this stops."""
    counts = ReadCounts()
    records = iter_results(config.results_dir, counts)
    first = next(records, None)
    fmt = _format(config, first)
    summary = ExportSummary(format=config.format, outputs=config.output_paths())
    with AtomicFiles(summary.outputs, overwrite=config.overwrite) as files:
        sinks = {k: _sink(config, files, k) for k in summary.outputs}
        try:
            if first is not None:
                _one(first, fmt, config, sinks, summary)
            for rec in records:
                _one(rec, fmt, config, sinks, summary)
                if on_row:
                    on_row(summary)
            if isinstance(fmt, TokensFormat) and fmt.without_ids_count:
                raise MissingTokenIdsError(
                    fmt.without_ids,
                    count=fmt.without_ids_count,
                    what=f"export {config.results_dir}",
                    hint="nothing was written; regenerate those rows where the server returns token ids, "
                    "or export without --require-token-ids (each such row then says ids_from: text and why)",
                )
            for sink in sinks.values():
                sink.close()
        except BaseException:
            for sink in sinks.values():
                sink.abort()
            raise
        files.commit()
    summary.corrupt_lines = counts.corrupt_lines
    if isinstance(fmt, TokensFormat):
        summary.from_ids, summary.retokenized = fmt.from_ids, fmt.retokenized
    summary.duplicates = counts.duplicates
    return summary


def _format(config: ExportConfig, first: dict[str, Any] | None) -> Format:
    if config.format in TOKEN_FORMATS:
        model = first.get("model") if first else None
        cls = SpeculatorsFormat if config.format == "speculators" else TokensFormat
        fmt = cls(config, load_tokenizer(require_tokenizer(config, model)))
        fmt.job_reasoning = job_reasoning(config.results_dir)  # for rows that do not record their policy
        return fmt
    return TEXT_FORMATS[config.format](config)


def _one(rec: dict[str, Any], fmt: Format, config: ExportConfig, sinks: dict[str, Any], summary: ExportSummary) -> None:
    summary.read += 1
    reason = rejection(rec, config)
    if reason is not None:
        summary.filtered[reason] += 1
        return
    try:
        rows = fmt.convert(rec)
    except RowRejected as e:
        summary.failed[e.reason] += 1
        if len(summary.failed_examples) < MAX_EXAMPLES:
            summary.failed_examples.append(f"{rec.get('id')}#{rec.get('sample')}: {e.reason}")
        return
    if len(rows) > 1:
        summary.split_conversations += 1
        summary.split_rows += len(rows)
    split = split_of(str(rec["id"]), config.eval_fraction, config.split_salt)
    for row in rows:
        supervised = fmt.supervised_tokens(row, rec)
        if config.format in TOKEN_FORMATS and supervised < config.min_supervised_tokens:
            summary.filtered[f"fewer than {config.min_supervised_tokens} supervised tokens"] += 1
            continue
        sinks[split].write(row)
        summary.written[split] += 1
        summary.supervised_tokens += supervised
        if "input_ids" in row:
            summary.total_tokens += len(row["input_ids"])


class _JsonlSink:
    def __init__(self, f: IO[bytes]) -> None:
        self.f = f

    def write(self, row: dict[str, Any]) -> None:
        self.f.write(orjson.dumps(row) + b"\n")

    def close(self) -> None:
        self.f.flush()

    def abort(self) -> None:
        pass


class _ParquetSink:
    """Rows buffered in batches and written as row groups: memory stays bounded."""

    def __init__(self, path: Any) -> None:
        import pyarrow.parquet as pq

        self.schema = parquet_schema()
        self.writer = pq.ParquetWriter(str(path), self.schema, compression="zstd")
        self.rows: list[dict[str, Any]] = []

    def write(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        if len(self.rows) >= PARQUET_BATCH:
            self._flush()

    def _flush(self) -> None:
        import pyarrow as pa

        if self.rows:
            self.writer.write_table(pa.Table.from_pylist(self.rows, schema=self.schema))
            self.rows = []

    def close(self) -> None:
        self._flush()
        self.writer.close()

    def abort(self) -> None:
        try:
            self.writer.close()
        except Exception:  # the temp file is removed anyway
            pass


def _sink(config: ExportConfig, files: AtomicFiles, key: str) -> Any:
    if config.format == "tokens":
        return _ParquetSink(files.path(key))
    return _JsonlSink(files.open(key))
