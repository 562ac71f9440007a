"""A captured row's file (bf16 and fp8 as hs-connectors stores it) and the journal's resume by (id, sample)."""

from __future__ import annotations

import pytest
import torch

from fleetgen.capture.journal import CAPTURED, Journal
from fleetgen.capture.tensors import IdsMismatch, check_ids, decode, encode, read_file, write_file
from fleetgen.errors import ResumeMismatchError


def test_fp8_has_one_float32_scale_per_token_and_dequantizes_close(tmp_path):
    hidden = torch.randn(7, 4, 32) * torch.linspace(1, 300, 7).reshape(7, 1, 1)
    t = encode(hidden, list(range(7)), "fp8")
    assert t["hidden_states"].dtype == torch.float8_e4m3fn and t["hidden_states"].shape == (7, 4, 32)
    assert t["hidden_states_scales"].dtype == torch.float32 and t["hidden_states_scales"].shape == (7, 1, 1)
    assert t["token_ids"].dtype == torch.int64
    n = write_file(tmp_path / "hs_0.safetensors", t)
    assert n == (tmp_path / "hs_0.safetensors").stat().st_size
    back = decode(read_file(tmp_path / "hs_0.safetensors")).float()
    rel = ((back - hidden).abs().amax(dim=(1, 2)) / hidden.abs().amax(dim=(1, 2))).max().item()
    assert rel < 0.07  # e4m3: 3 mantissa bits
    assert list(tmp_path.iterdir()) == [tmp_path / "hs_0.safetensors"]  # no temporary left


def test_bf16_keeps_the_tensor_names_speculators_reads(tmp_path):
    t = encode(torch.randn(3, 2, 8), [5, 6, 7], "bf16")
    assert set(t) == {"hidden_states", "token_ids"} and t["hidden_states"].dtype == torch.bfloat16


def test_ids_other_than_the_recorded_are_refused():
    check_ids(torch.tensor([1, 2, 3]), [1, 2, 3], "row")
    with pytest.raises(IdsMismatch, match="position 1"):
        check_ids(torch.tensor([1, 9, 3]), [1, 2, 3], "row")
    with pytest.raises(IdsMismatch):
        encode(torch.randn(2, 1, 4), [1, 2, 3], "bf16")


def _line(i: str, sample: int, index: int) -> dict:
    return {
        "id": i,
        "sample": sample,
        "index": index,
        "file": f"hidden_states/hs_{index}.safetensors",
        "rows": 1,
        "lengths": [5],
        "tokens": 5,
        "bytes": 100,
        "seconds": 0.1,
        "ids_from": "recorded",
        "ts": 0.0,
    }


def test_resume_reads_keys_and_cuts_a_torn_line(tmp_path):
    j = Journal(tmp_path)
    j.append(_line("a", 0, 0))
    j.append(_line("a", 1, 1))
    j.close()
    with open(tmp_path / CAPTURED, "ab") as f:
        f.write(b'{"id": "b", "sample": 0, "ind')  # a kill mid-append
    again = Journal(tmp_path)
    again.load()
    assert set(again.entries) == {("a", 0), ("a", 1)} and again.next_index == 2
    assert (tmp_path / CAPTURED).read_bytes().endswith(b"\n")  # the torn line is gone, not glued to the next
    again.append(_line("b", 0, 2))
    again.close()
    third = Journal(tmp_path)
    third.load()
    assert third.done("b", 0) and third.next_index == 3


def test_another_capture_in_the_same_output_is_refused_unless_forced(tmp_path):
    ident = {"model": "m", "layers": [2, 15, 27, 30], "dtype": "bf16", "source": "r", "format": "speculators"}
    Journal(tmp_path).check_identity(ident, force=False)
    Journal(tmp_path).check_identity(ident, force=False)  # a resume of the same capture
    with pytest.raises(ResumeMismatchError, match="dtype"):
        Journal(tmp_path).check_identity({**ident, "dtype": "fp8"}, force=False)
    Journal(tmp_path).check_identity({**ident, "dtype": "fp8"}, force=True)
