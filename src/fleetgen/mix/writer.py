"""Writing prompt records: JSONL (one object per line) or Parquet, atomically, in the chosen order.

Records are first spooled to a temporary JSONL in the order they are read back from the
sources, then copied to the output in the seeded shuffled order by offset, so memory stays
bounded by the offsets, not the records.

Parquet layout: `id` string; `messages` list<struct<role, content, tool_calls, tool_call_id>>
where `tool_calls` is JSON text; `tools` and `meta` are JSON text, because their shapes differ
per row (tool schemas are arbitrary JSON Schema). `read_prompt_records` decodes both formats
back into prompt-record dicts.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson

from fleetgen.atomic import atomic_file
from fleetgen.errors import ConfigError, InputError

FORMATS = {".jsonl": "jsonl", ".parquet": "parquet"}


def output_format(path: str | Path) -> str:
    fmt = FORMATS.get(Path(path).suffix.lower())
    if fmt is None:
        raise ConfigError(f"output {path}: unknown format", hint="name the output *.jsonl or *.parquet")
    return fmt


class Spool:
    """A temporary JSONL of records, each addressable by its slot number."""

    def __init__(self, directory: Path, size: int) -> None:
        fd, name = tempfile.mkstemp(prefix=".mix-spool-", suffix=".jsonl", dir=directory)
        self.path = Path(name)
        self._fh = os.fdopen(fd, "wb")
        self.offsets = [-1] * size
        self.lengths = [0] * size

    def put(self, slot: int, record: dict[str, Any]) -> None:
        line = orjson.dumps(record) + b"\n"
        self.offsets[slot] = self._fh.tell()
        self.lengths[slot] = len(line)
        self._fh.write(line)

    def close(self) -> None:
        self._fh.close()

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def _message_row(m: dict[str, Any]) -> dict[str, Any]:
    return {
        "role": m["role"],
        "content": m["content"],
        "tool_calls": orjson.dumps(m["tool_calls"]).decode() if m.get("tool_calls") else None,
        "tool_call_id": m.get("tool_call_id"),
    }


def write_records(lines: Iterator[bytes], output: Path, fmt: str, batch_rows: int = 8192) -> int:
    """Write JSONL lines to `output` (replaced whole: fleetgen.atomic); returns the rows written."""
    output.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with atomic_file(output) as fh:
        if fmt == "jsonl":
            for line in lines:
                fh.write(line)
                n += 1
        else:
            import pyarrow as pa
            import pyarrow.parquet as pq

            schema = pa.schema(
                [
                    ("id", pa.string()),
                    (
                        "messages",
                        pa.list_(
                            pa.struct(
                                [
                                    ("role", pa.string()),
                                    ("content", pa.string()),
                                    ("tool_calls", pa.string()),
                                    ("tool_call_id", pa.string()),
                                ]
                            )
                        ),
                    ),
                    ("tools", pa.string()),
                    ("meta", pa.string()),
                ]
            )
            with pq.ParquetWriter(fh, schema, compression="zstd") as w:
                batch: list[dict[str, Any]] = []
                for line in lines:
                    r = orjson.loads(line)
                    batch.append(
                        {
                            "id": r["id"],
                            "messages": [_message_row(m) for m in r["messages"]],
                            "tools": orjson.dumps(r["tools"]).decode() if r.get("tools") else None,
                            "meta": orjson.dumps(r.get("meta", {})).decode(),
                        }
                    )
                    if len(batch) >= batch_rows:
                        w.write_table(pa.Table.from_pylist(batch, schema=schema))
                        n += len(batch)
                        batch = []
                if batch:
                    w.write_table(pa.Table.from_pylist(batch, schema=schema))
                    n += len(batch)
    return n


def read_prompt_records(path: str | Path) -> Iterator[dict[str, Any]]:
    """Prompt records from a JSONL or Parquet file written by `mix` (JSON columns decoded)."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"prompt file not found: {p}")
    if output_format(p) == "jsonl":
        with p.open("rb") as fh:
            for line in fh:
                if line.strip():
                    yield orjson.loads(line)
        return
    import pyarrow.parquet as pq

    for batch in pq.ParquetFile(p).iter_batches(batch_size=4096):
        for r in batch.to_pylist():
            messages = []
            for m in r["messages"]:
                msg: dict[str, Any] = {"role": m["role"], "content": m["content"]}
                if m.get("tool_calls"):
                    msg["tool_calls"] = orjson.loads(m["tool_calls"])
                if m.get("tool_call_id"):
                    msg["tool_call_id"] = m["tool_call_id"]
                messages.append(msg)
            out: dict[str, Any] = {"id": r["id"], "messages": messages}
            if r.get("tools"):
                out["tools"] = orjson.loads(r["tools"])
            out["meta"] = orjson.loads(r["meta"]) if r.get("meta") else {}
            yield out


def ordered(spool: Spool, order: Sequence[int]) -> Iterator[bytes]:
    """The spooled lines in `order` (slot numbers)."""
    with spool.path.open("rb") as fh:
        for slot in order:
            off = spool.offsets[slot]
            if off < 0:
                continue
            fh.seek(off)
            yield fh.read(spool.lengths[slot])
