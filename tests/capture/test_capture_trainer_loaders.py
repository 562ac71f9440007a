"""fleetgen capture's output read by the trainers' own loaders, as training would read it.

speculators 0.9.0's `ArrowDataset(on_missing="raise")` (and, for fp8, hs-connectors' `FP8Transfer`) must
read every row of a capture: the ids equal the generate row's recorded ids, the hidden states equal the
file fleetgen wrote, split as the trainer splits them (all layers but the last, then the last as the
verifier's pre-norm final state). The capture runs the transformers backend over SmolLM2 on CPU (no
fleet needed); what each loader reads is docs/capture-formats.md. speculators, hs-connectors and SpecForge
are installed by scripts/setup-dev.sh (pinned, --no-deps); a missing one fails here rather than skipping.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest
from capture_helpers import record, write_results

from fleetgen.rows.token_ids import recorded_turns

torch = pytest.importorskip("torch")

HIDDEN, NUM_LAYERS = 576, 30  # SmolLM2-135M
RECORDS = [(i, s) for i in range(6) for s in (0, 1)]


def _trainer(module: str):
    try:
        return importlib.import_module(module)
    except ImportError as e:
        pytest.fail(f"{module} is not importable ({e}); scripts/setup-dev.sh installs it (pinned, --no-deps)")


@pytest.fixture(scope="module")
def tok():
    from fleetgen.errors import FleetgenError
    from fleetgen.export import load_tokenizer

    try:
        return load_tokenizer("smollm2")
    except FleetgenError as e:
        pytest.skip(f"embedded model not prepared ({e.message}); run `fleetgen model prepare smollm2`")


@pytest.fixture(scope="module")
def results(tok, tmp_path_factory) -> tuple[Path, list[dict]]:
    """12 records with recorded ids and one without (the text path)."""
    recs = [record(tok, i, s) for i, s in RECORDS] + [record(tok, 6, 0, with_ids=False)]
    return write_results(tmp_path_factory.mktemp("results"), recs), recs


def _capture(results_dir: Path, out: Path, **kw) -> Path:
    from fleetgen.capture import CaptureConfig, capture

    capture(CaptureConfig(results_dir=results_dir, output=out, backend="transformers", model="smollm2", **kw))
    return out


@pytest.fixture(scope="module")
def eagle3(results, tmp_path_factory) -> Path:
    return _capture(results[0], tmp_path_factory.mktemp("cap") / "eagle3", layers="eagle3", dtype="bf16")


@pytest.fixture(scope="module")
def eagle3_fp8(results, tmp_path_factory) -> Path:
    return _capture(results[0], tmp_path_factory.mktemp("cap") / "fp8", layers="eagle3", dtype="fp8")


@pytest.fixture(scope="module")
def dflash(results, tmp_path_factory) -> Path:
    return _capture(results[0], tmp_path_factory.mktemp("cap") / "dflash", layers="dflash", draft_layers=3)


def _journal(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "captured.jsonl").read_text().splitlines() if x.strip()]


def _file(out: Path, i: int) -> dict:
    from safetensors.torch import load_file

    return load_file(str(out / "hidden_states" / f"hs_{i}.safetensors"))


def _read_all(ds) -> list[dict]:
    """Every row as the trainer's dataloader gets it; a SampleUnavailable (dropped by training) fails."""
    recovery = _trainer("speculators.train.recovery")
    rows = [ds[i] for i in range(len(ds))]
    dropped = [i for i, r in enumerate(rows) if isinstance(r, recovery.SampleUnavailable)]
    assert not dropped, f"rows the trainer would drop (ids differ from the Arrow row): {dropped}"
    return rows


def test_arrowdataset_reads_every_row_with_the_recorded_ids_and_the_written_states(eagle3, results):
    data = _trainer("speculators.train.data")
    ds = data.ArrowDataset(max_len=4096, datapath=str(eagle3), on_missing="raise")
    journal = _journal(eagle3)
    assert len(ds) == sum(e.get("rows", 1) for e in journal) == len(results[1])  # one row per one-turn record
    rows = _read_all(ds)
    for i, row in enumerate(rows):
        f = _file(eagle3, i)
        assert f["hidden_states"].shape == (len(f["token_ids"]), 4, HIDDEN)  # [2, 15, 27, 30]
        assert f["hidden_states"].dtype == torch.bfloat16 and f["token_ids"].dtype == torch.int64
        assert torch.equal(row["input_ids"], f["token_ids"])
        assert torch.equal(row["hidden_states"], f["hidden_states"][:, :3].flatten(1))  # what the drafter's fc reads
        assert torch.equal(row["verifier_last_hidden_states"], f["hidden_states"][:, 3])
    by_key = {(r["id"], r["sample"]): r for r in results[1]}
    for e in journal:
        rec, row = by_key[(e["id"], e["sample"])], rows[e["index"]]
        assert e["file"] == f"hidden_states/hs_{e['index']}.safetensors" and e["tokens"] == len(row["input_ids"])
        turns = recorded_turns(rec)
        if turns is None:  # the record without ids: said so, and still read
            assert e["ids_from"] == "text"
            continue
        assert e["ids_from"] == "recorded"
        (t,) = turns
        assert row["input_ids"].tolist() == t.prompt + t.completion  # the exact ids generate recorded
        assert row["loss_mask"].tolist() == [0] * len(t.prompt) + [1] * len(t.completion)


def test_the_last_slot_is_the_pre_norm_state_the_trainer_normalizes(eagle3):
    # speculators applies its frozen verifier_norm to the last slot: with the target's own final norm it
    # must give what the target's LM head reads (transformers' post-norm last hidden state).
    from transformers import AutoModelForCausalLM

    from fleetgen.models.registry import resolve_model

    model = AutoModelForCausalLM.from_pretrained(resolve_model("smollm2", prepare=False), dtype=torch.bfloat16).eval()
    f = _file(eagle3, 0)
    with torch.no_grad():
        out = model.model(input_ids=f["token_ids"][None], output_hidden_states=True)
        normed = model.model.norm(f["hidden_states"][:, 3][None])[0]
    assert torch.allclose(normed.float(), out.last_hidden_state[0].float(), atol=0.1, rtol=0.05)
    assert not torch.allclose(f["hidden_states"][:, 3].float(), out.last_hidden_state[0].float(), atol=0.1)


def test_fp8_reads_through_hs_connectors_fp8transfer_close_to_bf16(eagle3, eagle3_fp8):
    data = _trainer("speculators.train.data")
    hs = _trainer("hs_connectors")
    fp8 = _trainer("hs_connectors.fp8_utils")
    ds = data.ArrowDataset(
        max_len=4096,
        datapath=str(eagle3_fp8),
        on_missing="raise",
        transfer=hs.FP8Transfer(eagle3_fp8 / "hidden_states"),
    )
    ref = data.ArrowDataset(max_len=4096, datapath=str(eagle3), on_missing="raise")
    assert len(ds) == len(ref)
    rows = _read_all(ds)
    by_ids = {tuple(r["input_ids"].tolist()): r for r in _read_all(ref)}
    for i, row in enumerate(rows):
        f = _file(eagle3_fp8, i)
        assert f["hidden_states"].dtype == torch.float8_e4m3fn
        assert f[fp8.SCALES_KEY].dtype == torch.float32 and f[fp8.SCALES_KEY].shape == (len(f["token_ids"]), 1, 1)
        full = fp8.dequantize_fp8_tensor(f["hidden_states"], f[fp8.SCALES_KEY])
        assert torch.equal(row["hidden_states"], full[:, :3].flatten(1))
        # e4m3 keeps 3 mantissa bits (a value's rounding error is at most 1/16 of it): a row's error is a few %
        want = by_ids[tuple(row["input_ids"].tolist())]
        x, y = want["hidden_states"].float(), row["hidden_states"].float()
        assert ((x - y).norm() / x.norm()).item() < 0.05


def test_dflash_capture_reads_with_its_layers_before_the_last(dflash):
    from fleetgen.capture.layers import dflash_layers

    data = _trainer("speculators.train.data")
    layers = dflash_layers(NUM_LAYERS, 3)
    assert layers[-1] == NUM_LAYERS  # N last: the verifier's slot, or the deepest DFlash layer would be taken for it
    rows = _read_all(data.ArrowDataset(max_len=4096, datapath=str(dflash), on_missing="raise"))
    for row in rows:
        assert row["hidden_states"].shape == (len(row["input_ids"]), (len(layers) - 1) * HIDDEN)


def test_a_missing_file_raises_and_a_truncated_one_is_never_read_as_whole(eagle3, tmp_path):
    # What on_missing="raise" promises, on a copy of the capture: the trainer fails loudly, not silently.
    import shutil

    data = _trainer("speculators.train.data")
    cp = tmp_path / "cp"
    shutil.copytree(eagle3, cp)
    (cp / "hidden_states" / "hs_1.safetensors").unlink()
    blob = (cp / "hidden_states" / "hs_2.safetensors").read_bytes()
    (cp / "hidden_states" / "hs_2.safetensors").write_bytes(blob[: len(blob) // 2])
    ds = data.ArrowDataset(max_len=4096, datapath=str(cp), on_missing="raise")
    with pytest.raises(RuntimeError, match="Failed to load hidden states for sample 1"):
        ds[1]
    with pytest.raises(Exception, match="(?i)deserializ|incomplete|invalid|header"):
        ds[2]


def test_specforge_reads_the_capture_if_fleetgen_writes_its_layout(eagle3):
    # SpecForge's offline reader runs here (CPU, pure torch): OfflineManifestReader + load_feature_file + the
    # EAGLE-3 normalizer. fleetgen capture writes only speculators' layout so far (capture.json "format").
    identity = json.loads((eagle3 / "capture.json").read_text())
    if identity.get("format", "speculators") == "speculators" and not (eagle3 / "specforge").exists():
        pytest.skip(
            "fleetgen capture writes speculators' layout only (capture.json format: speculators); SpecForge's "
            "reader runs here, its layout (data_{i}.ckpt: input_ids, loss_mask, hidden_state post-norm "
            "[1, seq, H], aux_hidden_state [1, seq, 3H]) is in docs/capture-formats.md"
        )
    reader = _trainer("specforge.runtime.data_plane.offline_reader")
    store = _trainer("specforge.runtime.data_plane.feature_store")
    eagle = _trainer("specforge.algorithms.eagle3.data")
    refs = reader.OfflineManifestReader(str(eagle3 / "specforge"), validate_files=True).read()
    assert refs
    for ref in refs:
        raw = store.load_feature_file(ref.feature_store_uri.removeprefix("file://"))
        norm = eagle.normalize_offline_sample(raw, max_len=4096)
        assert norm["hidden_state"].shape[-1] == 3 * HIDDEN and norm["target"].shape[-1] == HIDDEN
