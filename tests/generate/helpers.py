"""Shared helpers of the generate tests: prompt files and the exactly-once check."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import orjson


def write_prompts(path: Path, n: int, *, prefix: str = "p", words: str = "Name one color.") -> Path:
    with open(path, "w") as f:
        for i in range(n):
            f.write(
                json.dumps({"id": f"{prefix}{i}", "messages": [{"role": "user", "content": f"{words} ({i})"}]}) + "\n"
            )
    return path


def read_jsonl(path: Path) -> list[dict]:
    """Every line must parse: a corrupt line fails the test here."""
    if not path.exists():
        return []
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def assert_exactly_once(outdir: Path, ids: list[str], samples: int) -> tuple[list[dict], list[dict]]:
    """Every (id, sample) appears once across results and per-sample errors; nothing else does."""
    results = read_jsonl(outdir / "results.jsonl")
    errors = [e for e in read_jsonl(outdir / "errors.jsonl") if e["sample"] is not None]
    keys = Counter((r["id"], r["sample"]) for r in results + errors)
    dups = {k: c for k, c in keys.items() if c > 1}
    assert not dups, f"duplicated: {list(dups)[:5]}"
    expected = {(i, s) for i in ids for s in range(samples)}
    missing = expected - set(keys)
    assert not missing, f"lost: {sorted(missing)[:5]} ({len(missing)} in all)"
    assert set(keys) == expected
    return results, errors


def keys_across_shards(outdir: Path) -> Counter:
    """Every (id, sample) recorded in any shard's results or per-sample errors, with its count."""
    rows = [(r["id"], r["sample"]) for p in outdir.glob("results*.jsonl") for r in read_jsonl(p)]
    rows += [
        (e["id"], e["sample"]) for p in outdir.glob("errors*.jsonl") for e in read_jsonl(p) if e["sample"] is not None
    ]
    return Counter(rows)
