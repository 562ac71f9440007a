"""Fixtures of the export tests: a committed real SmolLM2 run and the embedded model's tokenizer."""

from __future__ import annotations

from pathlib import Path

import pytest
from export_helpers import RUN, read_jsonl


@pytest.fixture(scope="session")
def run_dir() -> Path:
    return RUN


@pytest.fixture(scope="session")
def results() -> list[dict]:
    return read_jsonl(RUN / "results.jsonl")


@pytest.fixture(scope="session")
def tokenizer():
    from fleetgen.errors import FleetgenError
    from fleetgen.export import load_tokenizer

    try:
        return load_tokenizer("smollm2")
    except FleetgenError as e:
        pytest.skip(f"embedded tokenizer not prepared ({e.message}); run `fleetgen model prepare smollm2`")
