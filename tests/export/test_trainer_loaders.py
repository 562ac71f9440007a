"""fleetgen's exports read by the trainers' own loaders: speculators' and SpecForge's, as installed by scripts/setup.sh.

Both run on the committed real SmolLM2 run (tests/export/fixtures/smollm2-run): its speculators export
(input_ids and loss_mask, one row per generation) is what speculators' `prepare-data` reads, and also
what SpecForge trains from as pre-tokenized online data (`data.prompts_path`). The loaders must keep
every row, with its ids and mask unchanged. The trainers are not fleetgen dependencies; setup.sh
installs them (pinned, without their dependencies): a missing one fails here rather than skipping.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from export_helpers import read_jsonl

from fleetgen.export import ExportConfig, export


def _trainer(module: str):
    try:
        return importlib.import_module(module)
    except ImportError as e:
        pytest.fail(
            f"{module} is not importable ({e}); scripts/setup.sh installs it (speculators, specforge, --no-deps)"
        )


@pytest.fixture(scope="module")
def speculators_export(run_dir, tokenizer, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("trainers") / "speculators.jsonl"
    export(
        ExportConfig(
            results_dir=run_dir,
            output=out,
            format="speculators",
            tokenizer="smollm2",
            finish_reasons=["stop", "length"],
        )
    )
    return out


def test_specforge_reads_the_speculators_export_as_pre_tokenized_prompts(speculators_export):
    builder = _trainer("specforge.data.prompt_builder")
    ours = read_jsonl(speculators_export)
    assert ours
    # What SpecForge's trainer calls for `data.prompts_path` (training/assembly.py, _prepare_prompts).
    prompts = builder.prepare_prompt_tasks(
        str(speculators_export),
        None,
        chat_template=None,
        max_length=4096,
        is_preformatted=False,
        train_only_last_turn=False,
        cache_dir=None,
        cache_key=None,
        num_proc=1,
    )
    theirs = [(p["payload"]["input_ids"], p["payload"]["loss_mask"]) for p in prompts]
    assert theirs == [(r["input_ids"], r["loss_mask"]) for r in ours]  # every row, in order, unchanged


def test_speculators_reads_the_speculators_export_unchanged(speculators_export):
    prep = _trainer("speculators.data_generation.preprocessing")
    from fleetgen.models.registry import resolve_model

    ours = read_jsonl(speculators_export)
    ds, _ = prep.load_and_preprocess_dataset(
        str(resolve_model("smollm2", prepare=False)),
        [str(speculators_export)],
        seq_length=4096,
        build_dataset_num_proc=1,
        skip_token_freq=True,
    )
    theirs = sorted((list(map(int, r["input_ids"])), list(map(int, r["loss_mask"]))) for r in ds)
    assert theirs == sorted((r["input_ids"], r["loss_mask"]) for r in ours)
