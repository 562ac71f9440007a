"""One captured row as a safetensors file: speculators' tensors, in bf16 or in fp8 with a scale per token.

Tensors (speculators.train.data.ArrowDataset and hs_connectors read these names):
- `token_ids`: int64 [seq], the row's ids (checked equal to the recorded ids before the file is written);
- `hidden_states`: [seq, layers, hidden], bf16, or float8_e4m3fn with
- `hidden_states_scales`: float32 [seq, 1, 1] (fp8 only): one scale per token over all its layers, amax/448,
  dequantized as fp8 x scale, as hs_connectors' FP8HiddenStatesConnector writes and its FP8Transfer reads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from fleetgen.atomic import atomic_file
from fleetgen.errors import OutputError

Dtype = Literal["bf16", "fp8"]
SCALES = "hidden_states_scales"
BYTES_PER_VALUE = {"bf16": 2, "fp8": 1}


class IdsMismatch(ValueError):
    """The ids a backend computed over are not the row's recorded ids: its hidden states belong to other tokens."""


def encode(hidden: Any, token_ids: list[int], dtype: Dtype) -> dict[str, Any]:
    """The file's tensors for hidden states [seq, layers, hidden] over `token_ids`."""
    import torch

    if hidden.dim() != 3 or hidden.shape[0] != len(token_ids):
        raise IdsMismatch(f"hidden states of shape {tuple(hidden.shape)} for {len(token_ids)} ids")
    ids = torch.tensor(token_ids, dtype=torch.int64)
    if dtype == "bf16":
        return {"hidden_states": hidden.to(torch.bfloat16).contiguous(), "token_ids": ids}
    fp8 = torch.float8_e4m3fn
    x = hidden.float()
    scale = (x.abs().amax(dim=(1, 2), keepdim=True) / torch.finfo(fp8).max).clamp(min=1e-12)
    return {"hidden_states": (x / scale).to(fp8).contiguous(), SCALES: scale.contiguous(), "token_ids": ids}


def decode(tensors: dict[str, Any]) -> Any:
    """The hidden states of a file's tensors as bf16 (fp8 dequantized with its scales)."""
    import torch

    hs = tensors["hidden_states"]
    if SCALES in tensors:
        return hs.to(torch.bfloat16) * tensors[SCALES].to(torch.bfloat16)
    return hs.to(torch.bfloat16)


def check_ids(token_ids: Any, expected: list[int], where: str) -> None:
    """Raise IdsMismatch unless `token_ids` (a tensor or list) are exactly `expected`."""
    got = token_ids.tolist() if hasattr(token_ids, "tolist") else list(token_ids)
    if got != expected:
        first = next(
            (i for i, (a, b) in enumerate(zip(got, expected, strict=False)) if a != b), min(len(got), len(expected))
        )
        raise IdsMismatch(
            f"{where}: {len(got)} ids differ from the row's {len(expected)} recorded ids (first at position {first})"
        )


def write_file(path: Path, tensors: dict[str, Any]) -> int:
    """Write the tensors whole or not at all (temp, fsync, rename, fsync dir); returns the bytes written."""
    from safetensors.torch import save

    data = save(tensors)
    try:
        with atomic_file(path) as f:
            f.write(data)
    except OSError as e:
        raise OutputError(f"cannot write {path}: {e}", hint="check free space and permissions of the output") from None
    return len(data)


def read_file(path: Path) -> dict[str, Any]:
    """A file's tensors (for checks and tests)."""
    from safetensors.torch import load_file

    return load_file(str(path))
