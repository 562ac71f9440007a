"""The conversion reads the GGUF once: within it, one parse per file; after it, gguf as it was (issue 43).

A small GGUF is written with gguf's own writer; the conversion of the real SmolLM2 file runs in every
setup (scripts/setup.sh) and the engine tests serve its output.
"""

from __future__ import annotations

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
pytest.importorskip("transformers")

from fleetgen.models import smollm2  # noqa: E402


def tiny_gguf(path) -> None:
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.ones((4, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_within_the_conversion_each_file_is_parsed_once_and_gguf_is_restored_after(tmp_path):
    from transformers import modeling_gguf_pytorch_utils as loader

    path = tmp_path / "tiny.gguf"
    tiny_gguf(path)
    reader, name_map, bar = gguf.GGUFReader, gguf.get_tensor_name_map, loader.tqdm
    with smollm2.read_gguf_once():
        first = gguf.GGUFReader(path)
        assert gguf.GGUFReader(path) is first  # the second read is the first one's
        assert gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 1) is gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 1)
        assert list(loader.tqdm([1, 2], desc="x")) == [1, 2]
        assert [t.name for t in first.tensors] == ["token_embd.weight"]
    assert (gguf.GGUFReader, gguf.get_tensor_name_map, loader.tqdm) == (reader, name_map, bar)
    assert gguf.GGUFReader(path) is not gguf.GGUFReader(path)
