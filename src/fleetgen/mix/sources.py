"""Reading a source's raw rows: local JSONL/JSON/Parquet files (or a folder of them), or the Hugging Face Hub.

Rows are addressed by their position in the source, so a second pass can read back exactly
the rows the first pass selected without holding them in memory.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson

from fleetgen.errors import InputError
from fleetgen.mix.recipe import SourceSpec

LOCAL_SUFFIXES = (".jsonl", ".json", ".parquet")


class BadLine:
    """A raw row that could not even be parsed (invalid JSON); counted as a skipped row."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


def _is_local(path: str) -> bool:
    p = Path(path).expanduser()
    return p.exists() or path.endswith(LOCAL_SUFFIXES) or path.startswith((".", "/", "~")) or path.count("/") != 1


class RowSource:
    """Rows of one source as (position, row dict | BadLine)."""

    def __init__(self, spec: SourceSpec) -> None:
        self.spec = spec
        self.local = _is_local(spec.path)
        if self.local:
            self.files = self._local_files(Path(spec.path).expanduser())
            self._hub = None
        else:
            self.files = []
            self._hub = self._load_hub()

    def _local_files(self, p: Path) -> list[Path]:
        if not p.exists():
            raise InputError(
                f"source {self.spec.name!r}: file not found: {p}",
                hint="a local path must exist; a Hugging Face dataset is given as owner/name",
            )
        if p.is_dir():
            files = sorted(f for f in p.rglob("*") if f.is_file() and f.name.endswith(LOCAL_SUFFIXES))
            if not files:
                raise InputError(f"source {self.spec.name!r}: no .jsonl/.json/.parquet files in {p}")
            return files
        if not p.name.endswith(LOCAL_SUFFIXES):
            raise InputError(
                f"source {self.spec.name!r}: unsupported file type {p.name}", hint="use .jsonl, .json or .parquet"
            )
        return [p]

    def _load_hub(self) -> Any:
        try:
            import datasets
        except ImportError:
            raise InputError(
                "reading from the Hugging Face Hub needs `datasets`", hint="pip install 'fleetgen[mix]'"
            ) from None
        s = self.spec
        try:
            return datasets.load_dataset(s.path, s.config, split=s.split)
        except Exception as e:  # datasets raises many types (DatasetNotFoundError, ConnectionError, ValueError)
            raise InputError(
                f"source {s.name!r}: cannot load {s.path}"
                + (f" config {s.config}" if s.config else "")
                + f" split {s.split}: {type(e).__name__}: {e}",
                hint="check the repo id, config and split, and network access (or use a local file)",
            ) from None

    def columns(self) -> list[str]:
        """The column names of the source (of its first parsable row for JSON files)."""
        if self._hub is not None:
            return list(self._hub.column_names)
        for f in self.files:
            if f.suffix == ".parquet":
                import pyarrow.parquet as pq

                return list(pq.read_schema(f).names)
            for _, row in self._iter_file(f, 0):
                if isinstance(row, dict):
                    return list(row)
        return []

    def rows(self) -> Iterator[tuple[int, dict[str, Any] | BadLine]]:
        """Every row in order, up to the source's max_rows."""
        limit = self.spec.max_rows
        for pos, row in self._all_rows():
            if limit is not None and pos >= limit:
                return
            yield pos, row

    def take(self, positions: Iterable[int]) -> Iterator[tuple[int, dict[str, Any] | BadLine]]:
        """The rows at these positions (ascending), in that order."""
        wanted = iter(positions)
        nxt = next(wanted, None)
        if nxt is None:
            return
        if self._hub is not None:
            while nxt is not None:
                yield nxt, self._hub[int(nxt)]
                nxt = next(wanted, None)
            return
        for pos, row in self._all_rows(lazy=True):
            if pos == nxt:
                yield pos, (row() if callable(row) else row)
                nxt = next(wanted, None)
                if nxt is None:
                    return

    def _all_rows(self, lazy: bool = False) -> Iterator[tuple[int, Any]]:
        if self._hub is not None:
            for pos, row in enumerate(self._hub):
                yield pos, row
            return
        base = 0
        for f in self.files:
            last = base - 1
            for last, row in self._iter_file(f, base, lazy=lazy):
                yield last, row
            base = last + 1

    def _iter_file(self, f: Path, base: int, lazy: bool = False) -> Iterator[tuple[int, Any]]:
        if f.suffix == ".parquet":
            import pyarrow.parquet as pq

            pos = base
            for batch in pq.ParquetFile(f).iter_batches(batch_size=4096):
                for row in batch.to_pylist():
                    yield pos, row
                    pos += 1
            return
        with f.open("rb") as fh:
            head = fh.read(1)
            while head in (b" ", b"\n", b"\r", b"\t"):
                head = fh.read(1)
            fh.seek(0)
            if head == b"[":  # one JSON array
                try:
                    data = orjson.loads(fh.read())
                except orjson.JSONDecodeError as e:
                    raise InputError(f"source {self.spec.name!r}: {f} is not valid JSON: {e}") from None
                for i, row in enumerate(data):
                    yield base + i, row if isinstance(row, dict) else BadLine("row is not an object")
                return
            pos = base
            for line in fh:
                if not line.strip():
                    continue
                if lazy:
                    yield pos, (lambda line=line: _parse(line))
                else:
                    yield pos, _parse(line)
                pos += 1


def _parse(line: bytes) -> dict[str, Any] | BadLine:
    try:
        row = orjson.loads(line)
    except orjson.JSONDecodeError:
        return BadLine("invalid JSON")
    return row if isinstance(row, dict) else BadLine("row is not an object")
