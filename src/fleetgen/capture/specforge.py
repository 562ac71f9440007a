"""SpecForge 0.2.0's offline layout, written from a finished capture: one torch.save'd dict per captured row.

Why: SpecForge trains EAGLE-3 offline from `data_{i}.ckpt` files that its own writer
(scripts/prepare_hidden_states.py) can only make through SGLang on CUDA, and writes non-atomically (a kill
can leave a truncated file its resume skips). This converts what capture already wrote (journal, files,
Arrow dataset) into the layout SpecForge's `OfflineManifestReader` reads (docs/capture-formats.md):

    OUT/specforge/rows_{a}-{a+2000}/data_{i}.ckpt   # 2000 rows a subdirectory, SpecForge's --file-group-size

with `input_ids` int64 [seq], `loss_mask` int64 [seq], `hidden_state` bf16 [1, seq, H] (the FINAL,
post-norm state: capture's index N is pre-norm, so the target's final RMSNorm is applied here, in float32,
with `model.norm.weight` and `rms_norm_eps`), `aux_hidden_state` bf16 [1, seq, 3H] (indices 2, N//2, N-3
concatenated in that order). Only the eagle3 layer set maps onto it. fp8 files are dequantized to bf16 as
hs-connectors' FP8Transfer does. Each file is written whole (temp, fsync, rename); a file already whole
(torch's zip ends with its end-of-central-directory record) is kept, so a second run writes only what is
missing or truncated.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetgen.atomic import atomic_file
from fleetgen.capture import storage
from fleetgen.capture.dataset import hs_name
from fleetgen.capture.journal import IDENTITY, Journal
from fleetgen.capture.layers import eagle3_layers
from fleetgen.capture.tensors import decode, read_file
from fleetgen.errors import ConfigError, InputError, OutputError

SPECFORGE_DIR = "specforge"
FILE_GROUP_SIZE = 2000  # SpecForge's --file-group-size default
FLAG = "--specforge"
NORM_WEIGHT = "model.norm.weight"
_ZIP_END = b"PK\x05\x06"  # a zip's end-of-central-directory record: the last thing torch.save writes


def specforge_name(index: int) -> str:
    """Row `index`'s file, relative to OUT, as SpecForge's writer names it."""
    a = index // FILE_GROUP_SIZE * FILE_GROUP_SIZE
    return f"{SPECFORGE_DIR}/rows_{a}-{a + FILE_GROUP_SIZE}/data_{index}.ckpt"


@dataclass
class SpecforgeWritten:
    """What one conversion did: files written, files already whole (kept), bytes written."""

    written: int = 0
    kept: int = 0
    bytes: int = 0
    stopped: str | None = None


def check_layers(layers: list[int], num_layers: int) -> None:
    """Refuse a layer set other than eagle3's: SpecForge's EAGLE-3 file has exactly 3 aux layers and the final state."""
    want = eagle3_layers(num_layers)
    if list(layers) != want:
        raise ConfigError(
            f"{FLAG}: SpecForge's offline EAGLE-3 layout needs the eagle3 layers {want}, this capture has {layers}",
            hint=f"capture with --layers eagle3 (into another -o) for SpecForge, or leave out {FLAG}",
        )


def _whole(path: Path) -> bool:
    """A torch.save file that was written to its end (an existing file a kill or a copy cut short is not)."""
    try:
        with open(path, "rb") as f:
            f.seek(-22, 2)
            return f.read(4) == _ZIP_END
    except OSError:
        return False


def final_norm(model_path: str | Path) -> tuple[Any, float]:
    """(weight float32 [H], eps) of the target's final RMSNorm, read from its safetensors and config.json."""
    from safetensors import safe_open

    from fleetgen.doctor.modelinfo import read_model

    path = Path(model_path)
    hint = 'the capture\'s model directory (capture.json "model") must hold its safetensors weights'
    try:
        eps = float(read_model(path).config.get("rms_norm_eps") or 1e-6)
        index = path / "model.safetensors.index.json"
        if index.exists():
            name = json.loads(index.read_text())["weight_map"][NORM_WEIGHT]
        else:
            name = "model.safetensors"
        with safe_open(str(path / name), framework="pt") as f:
            weight = f.get_tensor(NORM_WEIGHT).float()
    except (OSError, KeyError, ValueError) as e:
        raise InputError(f"{FLAG}: cannot read {NORM_WEIGHT} of {path} ({e})", hint=hint) from None
    return weight, eps


def rms_norm(x: Any, weight: Any, eps: float) -> Any:
    """y = x / sqrt(mean(x^2) + eps) * weight, in float32 (as the target's LlamaRMSNorm computes it)."""
    import torch

    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def write_specforge(out: Path, model_path: str | Path | None = None) -> SpecforgeWritten:
    """Write OUT/specforge/... for every journaled row of the capture in OUT (see the module docstring).

    The model is capture.json's unless given. Run after the capture's Arrow dataset is written (its loss
    masks are read from it). Stops cleanly, nothing half-written, when free space falls under the margin.
    """
    import torch
    from datasets import load_from_disk

    out = Path(out)
    ident = json.loads((out / IDENTITY).read_text())
    check_layers(ident["layers"], int(ident["num_layers"]))
    weight, eps = final_norm(model_path or ident["model"])
    journal = Journal(out)
    journal.load()
    ds = load_from_disk(str(out)).with_format(None)
    if len(ds) < journal.next_index:
        raise InputError(
            f"{out}: the Arrow dataset has {len(ds)} rows, the journal {journal.next_index}",
            hint="write it after the capture's dataset (fleetgen capture rewrites it at the end of a run)",
        )
    for tmp in (out / SPECFORGE_DIR).glob("rows_*/*.tmp"):  # a killed run's temporaries (no reader reads them)
        tmp.unlink(missing_ok=True)
    done = SpecforgeWritten()
    for i in range(journal.next_index):
        path = out / specforge_name(i)
        if path.exists() and _whole(path):
            done.kept += 1
            continue
        tensors = read_file(out / hs_name(i))
        hs = decode(tensors)  # bf16 [seq, 4, H]; fp8 dequantized as FP8Transfer does
        seq = hs.shape[0]
        if not storage.room_left(out, upcoming=2 * seq * hs.shape[1] * hs.shape[2]):
            done.stopped = "free disk space fell under the margin"
            break
        mask = ds[i]["loss_mask"]
        if len(mask) != seq:
            raise InputError(f"{out}: row {i} has {seq} tokens in its file, {len(mask)} in the dataset")
        data = {
            "input_ids": tensors["token_ids"].to(torch.int64).clone(),
            "loss_mask": torch.tensor(mask, dtype=torch.int64),
            "hidden_state": rms_norm(hs[:, 3], weight, eps).to(torch.bfloat16)[None].contiguous(),
            "aux_hidden_state": hs[:, :3].reshape(seq, -1)[None].contiguous(),
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with atomic_file(path) as f:
                torch.save(data, f)
                done.bytes += f.tell()
        except OSError as e:
            hint = "check free space and permissions of the output"
            raise OutputError(f"cannot write {path}: {e}", hint=hint) from None
        done.written += 1
    return done
