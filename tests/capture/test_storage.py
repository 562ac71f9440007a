"""Storage known first: bytes a token as the files hold them, a job's total, the refusal and the margin."""

from __future__ import annotations

from collections import namedtuple

import pytest

from fleetgen.capture import storage
from fleetgen.capture.layers import dflash_layers, eagle3_layers
from fleetgen.errors import DiskSpaceError, OutputError

Usage = namedtuple("Usage", "total used free")


def test_bytes_per_token_is_layers_times_hidden_times_dtype_plus_id_and_fp8_scale():
    # the figures: EAGLE-3 on an 8B (4 x 4096) is 32 KiB of hidden states a token, DFlash's 5 layers 40 KiB
    assert storage.bytes_per_token(4096, 4, "bf16") == 32 * 1024 + 8
    assert storage.bytes_per_token(4096, 5, "bf16") == 40 * 1024 + 8
    # fp8: a byte a value, and ONE float32 scale per token over all its layers (hs_connectors' [seq, 1, 1])
    assert storage.bytes_per_token(4096, 4, "fp8") == 16 * 1024 + 8 + 4
    with pytest.raises(ValueError, match="fp16"):
        storage.bytes_per_token(4096, 4, "fp16")


def test_bytes_per_token_equals_a_real_files_bytes_per_token():
    torch = pytest.importorskip("torch")
    from safetensors.torch import save

    from fleetgen.capture.tensors import encode

    for dtype in ("bf16", "fp8"):
        sizes = {}
        for seq in (100, 300):
            data = save(encode(torch.randn(seq, 3, 64), list(range(seq)), dtype))
            sizes[seq] = len(data)
            assert len(data) - seq * storage.bytes_per_token(64, 3, dtype) <= storage.FILE_HEADER_BYTES
        assert (sizes[300] - sizes[100]) // 200 == storage.bytes_per_token(64, 3, dtype)  # the header is constant


def test_the_seed_jobs_storage_at_five_layers_is_about_45_tb():
    # ~600K answers of ~1.5K tokens on a 27B of hidden 5120 at 5 layers: the "about 45 TB"
    est = storage.estimate(5120, 5, "bf16", tokens=600_000 * 1500, rows=600_000)
    assert est.per_token == 5 * 5120 * 2 + 8
    assert 45e12 < est.hidden_states < 47e12
    assert est.total == est.hidden_states + est.dataset
    assert est.dataset == 600_000 * 1500 * 16 + 600_000 * storage.ROW_BYTES
    # Qwen3.6-27B: 64 layers; eagle3 takes 4, dflash (5 draft layers) 6 (its 5 and the last)
    assert len(eagle3_layers(64)) == 4 and len(dflash_layers(64, 5)) == 6
    fp8 = storage.estimate(5120, 4, "fp8", tokens=10, rows=1)
    assert fp8.per_token == 4 * 5120 + 12


def test_storage_line_names_per_token_tokens_rows_and_total():
    line = storage.storage_line(storage.estimate(4096, 4, "bf16", tokens=1_000_000, rows=1000), "eagle3 bf16")
    assert line.startswith("eagle3 bf16: 4 layers x 4096 bf16: 32,776 B (32.0 KiB) a token")
    assert "1,000,000 tokens in 1,000 rows" in line
    assert "32.79 GB" in line  # 1e6 x 32,776 + 1000 x 512 + 1e6 x 16 + 1000 x 272 = 32,792,784,000


def test_check_disk_refuses_naming_path_need_free_and_the_flag(tmp_path, monkeypatch):
    monkeypatch.setattr(storage.shutil, "disk_usage", lambda p: Usage(10**12, 0, 5 * 10**9))
    out = tmp_path / "not" / "yet"  # a path to be made: its nearest existing parent is asked
    with pytest.raises(DiskSpaceError) as e:
        storage.check_disk(out, 20 * 10**9, force=False)
    msg = str(e.value)
    assert str(out) in msg and "20.00 GB" in msg and "5.00 GB are free" in msg and "--force" in msg
    assert isinstance(e.value, OutputError)
    assert storage.check_disk(out, 20 * 10**9, force=True) == 5 * 10**9  # forced: starts
    assert storage.check_disk(out, 3 * 10**9, force=False) == 5 * 10**9  # 3 GB + 1 GiB margin fit in 5 GB


def test_room_left_counts_the_next_file_against_the_margin(tmp_path, monkeypatch):
    free = {"n": 3 << 30}
    monkeypatch.setattr(storage.shutil, "disk_usage", lambda p: Usage(10**12, 0, free["n"]))
    assert storage.room_left(tmp_path)
    assert not storage.room_left(tmp_path, upcoming=2 << 30)  # 3 GiB - 2 GiB leaves the 1 GiB margin, not more
    free["n"] = 1 << 30
    assert not storage.room_left(tmp_path)
    assert storage.room_left(tmp_path, margin=1 << 20)
