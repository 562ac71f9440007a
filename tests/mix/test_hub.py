"""The Hub path (`datasets.load_dataset(path, config, split=...)`),
offline: a real in-memory Dataset stands in for the download."""

from __future__ import annotations

import json

import datasets
import pytest

from fleetgen.config import validate
from fleetgen.errors import InputError
from fleetgen.mix import MixRecipe, build_mix, read_prompt_records


def test_hub_source_reads_a_datasets_dataset(fixtures, tmp_path, monkeypatch):
    rows = [json.loads(line) for line in (fixtures / "infinity_instruct_0625.jsonl").read_text().splitlines()]
    calls = []

    def fake_load(path, name=None, split=None, **kw):
        calls.append((path, name, split))
        return datasets.Dataset.from_list(rows)

    monkeypatch.setattr(datasets, "load_dataset", fake_load)
    r = validate(
        MixRecipe,
        {
            "total": 5,
            "sources": [
                {"name": "inf", "adapter": "infinity_instruct", "path": "BAAI/Infinity-Instruct", "config": "0625"}
            ],
            "quotas": {"domain": {"general": 0.4, "math": 0.2, "code": 0.2, "stem": 0.2}},
        },
        source="t",
    )
    s = build_mix(r, tmp_path / "p.jsonl")
    assert calls == [("BAAI/Infinity-Instruct", "0625", "train")]
    out = list(read_prompt_records(tmp_path / "p.jsonl"))
    assert s.rows_written == len(out) == 5
    assert {x["meta"]["original_id"] for x in out} <= {r["id"] for r in rows}


def test_hub_failure_is_one_clear_error(tmp_path, monkeypatch):
    def offline(*a, **kw):
        raise ConnectionError("Couldn't reach 'meta-math/MetaMathQA' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    r = validate(
        MixRecipe,
        {
            "total": 5,
            "sources": [{"name": "mm", "adapter": "metamathqa", "path": "meta-math/MetaMathQA"}],
            "quotas": {"domain": {"math": 1.0}},
        },
        source="t",
    )
    with pytest.raises(InputError, match=r"source 'mm': cannot load meta-math/MetaMathQA split train: ConnectionError"):
        build_mix(r, tmp_path / "p.jsonl")
