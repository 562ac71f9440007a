"""fleetgen capture's output read by the trainers' own loaders, as training would read it.

speculators 0.9.0's `ArrowDataset(on_missing="raise")` (and, for fp8, hs-connectors' `FP8Transfer`) must
read every row of a capture: the ids equal the generate row's recorded ids, the hidden states equal the
file fleetgen wrote, split as the trainer splits them (all layers but the last, then the last as the
verifier's pre-norm final state). The capture runs the transformers backend over SmolLM2 on CPU (no
fleet needed); what each loader reads is docs/capture-formats.md. With --specforge the same capture is
read by SpecForge 0.2.0's own offline reader (OfflineManifestReader, load_feature_file, EAGLE-3
normalizer). speculators, hs-connectors and SpecForge are installed by scripts/setup-dev.sh (pinned,
--no-deps); a missing one fails here rather than skipping.
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
    # --specforge: SpecForge's offline layout too, under OUT/specforge (the speculators layout is unchanged)
    out = tmp_path_factory.mktemp("cap") / "eagle3"
    return _capture(results[0], out, layers="eagle3", dtype="bf16", specforge=True)


@pytest.fixture(scope="module")
def eagle3_fp8(results, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cap") / "fp8"
    return _capture(results[0], out, layers="eagle3", dtype="fp8", specforge=True)


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


def _specforge_rows(out: Path) -> dict[int, dict]:
    """Every file SpecForge's own reader finds under OUT/specforge, loaded and normalized as its trainer does.

    OfflineManifestReader(validate_files=True) opens each file at assembly and checks its four keys are
    tensors; load_feature_file is its loader; normalize_offline_sample its EAGLE-3 per-sample mapping.
    """
    reader = _trainer("specforge.runtime.data_plane.offline_reader")
    store = _trainer("specforge.runtime.data_plane.feature_store")
    eagle = _trainer("specforge.algorithms.eagle3.data")
    refs = reader.OfflineManifestReader(str(out / "specforge"), validate_files=True).read()
    rows = {}
    for ref in refs:
        path = ref.feature_store_uri.removeprefix("file://")
        index = int(Path(path).stem.removeprefix("data_"))
        assert index not in rows, f"two files for row {index}"
        raw = store.load_feature_file(path)
        rows[index] = {"raw": raw, "norm": eagle.normalize_offline_sample(raw, max_len=4096), "path": path}
    return rows


def test_specforge_reads_the_capture_if_fleetgen_writes_its_layout(eagle3, results):
    from transformers import AutoModelForCausalLM

    from fleetgen.models.registry import resolve_model

    journal = _journal(eagle3)
    n = sum(e.get("rows", 1) for e in journal)
    rows = _specforge_rows(eagle3)
    assert sorted(rows) == list(range(n))  # every captured row exactly one file
    for i, r in rows.items():  # rows_{a}-{a+2000}/data_{i}.ckpt, as SpecForge's writer names them
        assert r["path"].endswith(f"specforge/rows_0-2000/data_{i}.ckpt")
    by_key = {(r["id"], r["sample"]): r for r in results[1]}
    for e in journal:
        raw = rows[e["index"]]["raw"]
        assert raw["input_ids"].dtype == raw["loss_mask"].dtype == torch.int64
        turns = recorded_turns(by_key[(e["id"], e["sample"])])
        if turns is None:
            continue
        (t,) = turns
        assert raw["input_ids"].tolist() == t.prompt + t.completion  # the exact ids generate recorded
        assert raw["loss_mask"].tolist() == [0] * len(t.prompt) + [1] * len(t.completion)

    path = resolve_model("smollm2", prepare=False)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).eval()  # the capture's own dtype
    model32 = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()

    def off(a, b):  # per token, max |a - b| over max |b|: the worst token
        return ((a - b).abs().amax(-1) / b.abs().amax(-1)).max().item()

    seen = {"abs_vs_hf_bf16": 0.0, "rel_vs_hf_bf16": 0.0, "rel_vs_fp32": 0.0, "hf_bf16_rel_vs_fp32": 0.0}
    for i, r in rows.items():
        raw, norm, f = r["raw"], r["norm"], _file(eagle3, i)
        seq = len(f["token_ids"])
        assert torch.equal(raw["input_ids"], f["token_ids"])
        assert raw["hidden_state"].dtype == raw["aux_hidden_state"].dtype == torch.bfloat16
        assert raw["hidden_state"].shape == (1, seq, HIDDEN) and raw["aux_hidden_state"].shape == (1, seq, 3 * HIDDEN)
        # aux: indices 2, N//2, N-3 concatenated on the last axis, exactly the captured layers
        assert torch.equal(raw["aux_hidden_state"][0], f["hidden_states"][:, :3].flatten(1))
        assert torch.equal(norm["hidden_state"], raw["aux_hidden_state"])  # what the EAGLE-3 drafter's fc reads
        assert norm["loss_mask"][0, -1] == 0 and norm["input_ids"].shape == (1, seq)
        # target: the FINAL POST-NORM state, what the LM head reads. The target's own norm over the captured
        # pre-norm state gives it to a bf16 rounding or two (transformers rounds before the weight, we after);
        got = norm["target"][0].float()
        with torch.no_grad():
            assert torch.allclose(got, model.model.norm(f["hidden_states"][:, 3][None])[0].float(), rtol=2 / 128)
            ids = f["token_ids"][None]
            hf = model(input_ids=ids, output_hidden_states=True).hidden_states[-1][0].float()
            hf32 = model32(input_ids=ids, output_hidden_states=True).hidden_states[-1][0]
        # and a transformers forward of the row alone (the capture batched rows) within bf16's own error:
        seen["abs_vs_hf_bf16"] = max(seen["abs_vs_hf_bf16"], (got - hf).abs().max().item())
        seen["rel_vs_hf_bf16"] = max(seen["rel_vs_hf_bf16"], off(got, hf))
        seen["rel_vs_fp32"] = max(seen["rel_vs_fp32"], off(got, hf32))
        seen["hf_bf16_rel_vs_fp32"] = max(seen["hf_bf16_rel_vs_fp32"], off(hf, hf32))
    print(f"specforge hidden_state vs transformers' post-norm hidden_states[-1]: {seen}")
    assert seen["rel_vs_hf_bf16"] < 0.06  # seen 0.031 (max abs 0.44 on values up to 50)
    # as far from float32 as transformers' own bf16 forward is (seen 0.089 and 0.084)
    assert seen["rel_vs_fp32"] < 1.5 * seen["hf_bf16_rel_vs_fp32"]


def test_specforge_fp8_capture_is_dequantized_as_fp8transfer_reads_it(eagle3, eagle3_fp8):
    fp8 = _trainer("hs_connectors.fp8_utils")
    rows, ref = _specforge_rows(eagle3_fp8), _specforge_rows(eagle3)
    assert sorted(rows) == sorted(ref)
    for i, r in rows.items():
        raw, f = r["raw"], _file(eagle3_fp8, i)
        full = fp8.dequantize_fp8_tensor(f["hidden_states"], f[fp8.SCALES_KEY])
        assert raw["aux_hidden_state"].dtype == torch.bfloat16
        assert torch.equal(raw["aux_hidden_state"][0], full[:, :3].flatten(1))
        want = ref[i]["raw"]["hidden_state"].float()  # the bf16 capture's post-norm state: a few % off at most
        got = raw["hidden_state"].float()
        assert ((got - want).norm() / want.norm()).item() < 0.05


def test_specforge_resume_rewrites_only_a_missing_or_truncated_file(eagle3, tmp_path):
    import shutil

    from fleetgen.capture import write_specforge

    cp = tmp_path / "cp"
    shutil.copytree(eagle3, cp)
    files = sorted((cp / "specforge").rglob("*.ckpt"))
    before = {p: p.stat().st_mtime_ns for p in files}
    gone, cut = cp / "specforge/rows_0-2000/data_3.ckpt", cp / "specforge/rows_0-2000/data_5.ckpt"
    original = {p: torch.load(p, weights_only=True) for p in (gone, cut)}
    gone.unlink()
    blob = cut.read_bytes()
    cut.write_bytes(blob[: len(blob) // 2])  # what a kill leaves behind SpecForge's own non-atomic writer
    leftover = cut.parent / "data_7.ckpt.999.tmp"  # a killed conversion's temporary
    leftover.write_bytes(b"partial")
    done = write_specforge(cp)
    assert (done.written, done.kept) == (2, len(files) - 2)
    assert not leftover.exists() and not list((cp / "specforge").rglob("*.tmp"))
    for p in files:
        if p in (gone, cut):
            again = torch.load(p, weights_only=True)
            assert all(torch.equal(again[k], original[p][k]) for k in original[p])
        else:
            assert p.stat().st_mtime_ns == before[p], f"{p.name} was rewritten"
    assert sorted(_specforge_rows(cp)) == list(range(len(files)))  # SpecForge reads every file whole again
    assert write_specforge(cp).written == 0


def test_specforge_refuses_a_layer_set_other_than_eagle3(dflash, results, tmp_path):
    from fleetgen.capture import CaptureConfig, write_specforge
    from fleetgen.errors import ConfigError

    with pytest.raises(ConfigError, match="--specforge.*--layers eagle3"):
        CaptureConfig(
            results_dir=results[0],
            output=tmp_path / "x",
            backend="transformers",
            model="smollm2",
            layers="dflash",
            specforge=True,
        )
    with pytest.raises(ConfigError, match="--specforge"):
        write_specforge(dflash)
