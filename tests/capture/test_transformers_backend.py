"""The transformers backend: each index at its depth, the same states batched as alone, and capture end to end."""

from __future__ import annotations

import pytest
import torch
from capture_helpers import read_jsonl, record, write_results

from fleetgen.capture import CaptureConfig, capture
from fleetgen.capture.tensors import read_file


@pytest.fixture(scope="module")
def tokenizer():
    from fleetgen.errors import FleetgenError
    from fleetgen.export import load_tokenizer

    try:
        return load_tokenizer("smollm2")
    except FleetgenError as e:
        pytest.skip(f"embedded model not prepared ({e.message}); run `fleetgen model prepare smollm2`")


@pytest.fixture(scope="module")
def model(tokenizer):
    from fleetgen.capture.forward import load_model
    from fleetgen.models.registry import resolve_model

    return load_model(resolve_model("smollm2", prepare=False))


def test_index_k_is_hf_hidden_states_k_and_n_is_the_last_layer_before_the_norm(model):
    from fleetgen.capture.forward import HiddenStateForward

    ids = [1, 9690, 2, 198, 28120, 314, 253, 1789, 30]
    n = model.config.num_hidden_layers
    got = HiddenStateForward(model, [0, 2, 15, n])([ids])[0]
    with torch.inference_mode():
        hf = model(torch.tensor([ids]), output_hidden_states=True).hidden_states
    for j, k in enumerate([0, 2, 15]):
        assert torch.equal(got[:, j], hf[k][0])
    # transformers' hidden_states[N] is after the final norm; index N is the norm's input, as vLLM gives it.
    assert not torch.equal(got[:, 3], hf[n][0])
    with torch.inference_mode():
        assert torch.allclose(model.model.norm(got[:, 3]).float(), hf[n][0].float(), atol=1e-2)


def test_rows_batched_with_padding_get_the_states_they_get_alone():
    """speculators #279's bug class: wrong hidden states at batch > 1. In float32, so bf16 noise cannot hide it."""
    from fleetgen.capture.forward import HiddenStateForward, load_model
    from fleetgen.models.registry import resolve_model

    fwd = HiddenStateForward(load_model(resolve_model("smollm2", prepare=False), dtype="fp32"), [2, 15, 27, 30])
    rows = [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], [1, 40, 41], [1, 500, 600, 700, 800, 900]]
    batched = fwd(rows)
    for row, b in zip(rows, batched, strict=True):
        alone = fwd([row])[0]
        assert b.shape == alone.shape == (len(row), 4, 576)
        rel = ((b.float() - alone.float()).abs().amax(-1) / alone.float().abs().amax(-1)).max().item()
        assert rel < 1e-4, rel  # float32 kernels at another batch shape, not another row's states


def test_capture_writes_each_record_once_and_resumes_by_key(tmp_path, tokenizer):
    recs = [record(tokenizer, i, s, with_ids=i != 2) for i in range(4) for s in range(2)]
    results = write_results(tmp_path / "results", recs)
    out = tmp_path / "out"
    cfg = CaptureConfig(results_dir=results, output=out, backend="transformers", model="smollm2", limit=3)
    first = capture(cfg)
    assert first.captured == 3
    rest = capture(cfg.model_copy(update={"limit": None}))
    assert rest.already == 3 and rest.captured == 5 and rest.from_text == 2
    again = capture(cfg.model_copy(update={"limit": None}))
    assert again.captured == 0 and again.total_captured == 8

    lines = read_jsonl(out / "captured.jsonl")
    assert sorted((x["id"], x["sample"]) for x in lines) == sorted((r["id"], r["sample"]) for r in recs)
    assert sorted(x["index"] for x in lines) == list(range(8))
    by_key = {(r["id"], r["sample"]): r for r in recs}
    for x in lines:
        assert x["ids_from"] == ("text" if x["id"] == "q-002" else "recorded")
        t = read_file(out / x["file"])
        assert t["hidden_states"].shape == (x["tokens"], 4, 576) and x["bytes"] == (out / x["file"]).stat().st_size
        if x["ids_from"] == "recorded":
            from fleetgen.rows.token_ids import recorded_turns

            turn = recorded_turns(by_key[(x["id"], x["sample"])])[0]
            assert t["token_ids"].tolist() == turn.prompt + turn.completion  # the ids the row recorded
    runs = read_jsonl(out / "runs.jsonl")
    assert [r["event"] for r in runs] == ["start", "end"] * 3 and runs[-1]["total_captured"] == 8

    from datasets import load_from_disk

    ds = load_from_disk(str(out))
    assert len(ds) == 8
    for x in lines:
        row = ds[x["index"]]
        assert row["input_ids"].tolist() == read_file(out / x["file"])["token_ids"].tolist()
        assert int(row["seq_len"]) == x["tokens"] and int(row["loss_mask"].sum()) > 0


def test_a_partial_file_left_by_a_crash_is_never_counted(tmp_path, tokenizer):
    results = write_results(tmp_path / "results", [record(tokenizer, i) for i in range(3)])
    out = tmp_path / "out"
    cfg = CaptureConfig(results_dir=results, output=out, backend="transformers", model="smollm2", limit=1)
    capture(cfg)
    hs = out / "hidden_states"
    (hs / "hs_1.safetensors").write_bytes(b"\x00\x01")  # renamed but never journaled: not done
    (hs / "hs_2.safetensors.123.tmp").write_bytes(b"partial")  # a temporary the kill left
    s = capture(cfg.model_copy(update={"limit": None}))
    assert s.captured == 2 and s.total_captured == 3
    assert sorted(p.name for p in hs.iterdir()) == [f"hs_{i}.safetensors" for i in range(3)]
    for i in range(3):
        assert read_file(hs / f"hs_{i}.safetensors")["hidden_states"].shape[1] == 4


def test_a_cancel_stops_a_forward_running_in_a_thread_at_its_next_layer(model):
    """Ctrl-C during capture: the batch in the forward thread must not run to its end first."""
    import threading

    from fleetgen.capture.forward import ForwardCancelled, HiddenStateForward

    fwd = HiddenStateForward(model, [2, 15, 27, 30])
    entered, release = threading.Event(), threading.Event()
    later_layers: list[int] = []

    def hold(*_):
        entered.set()
        release.wait(60)

    h0 = model.model.layers[0].register_forward_hook(hold)
    h1 = model.model.layers[1].register_forward_hook(lambda *_: later_layers.append(1))
    outcome: list[BaseException | None] = []

    def run():
        try:
            fwd([[1, 2, 3, 4]])
            outcome.append(None)
        except BaseException as e:  # noqa: BLE001 - what the thread raised is the result
            outcome.append(e)

    t = threading.Thread(target=run)
    try:
        t.start()
        assert entered.wait(60)
        fwd.cancel()
        release.set()
        t.join(60)
    finally:
        h0.remove()
        h1.remove()
    assert isinstance(outcome[0], ForwardCancelled)
    assert later_layers == []  # layer 0 finished, layer 1 never ran
    # its hooks went with it: another forward over the same model runs to the end
    assert HiddenStateForward(model, [2, 30])([[1, 2, 3, 4]])[0].shape == (4, 2, 576)
