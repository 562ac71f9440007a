"""speculators' layout around the hidden-state files: the Arrow dataset of input_ids/loss_mask/seq_len, row i <-> hs_i.

speculators.train.data.ArrowDataset `load_from_disk`s OUT and reads OUT/hidden_states/hs_{i}.safetensors
for row i, flat (its FileTransfer reads no subdirectory: docs/capture-formats.md). The columns are int64
lists with the torch format saved, as `speculators prepare-data` writes them. The dataset is rewritten
from the journal at the end of every run (the files it names are whole by then), so row i is always the
journal's index i. Built in memory: ~16 bytes a token (a million rows of 1.5K tokens: ~24 GB; see docs).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from fleetgen.atomic import fsync_dir
from fleetgen.capture.inputs import TokenRow

HS_DIR = "hidden_states"
DATASET_FILES = ("dataset_info.json", "state.json")


def hs_name(index: int) -> str:
    return f"{HS_DIR}/hs_{index}.safetensors"


def write_dataset(out: Path, rows: list[TokenRow]) -> Path:
    """Replace OUT's Arrow dataset with `rows` (row i is hs_i); stale data files of a longer one are removed."""
    from datasets import Dataset, Features, Sequence, Value

    features = Features(
        {"input_ids": Sequence(Value("int64")), "loss_mask": Sequence(Value("int64")), "seq_len": Value("int64")}
    )
    ds = Dataset.from_dict(
        {
            "input_ids": [r.input_ids for r in rows],
            "loss_mask": [r.loss_mask for r in rows],
            "seq_len": [len(r.input_ids) for r in rows],
        },
        features=features,
    )
    ds.set_format("torch")  # ArrowDataset compares tensors: a list-format dataset fails every row
    tmp = out / ".dataset.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    ds.save_to_disk(str(tmp))
    new = {p.name for p in tmp.iterdir()}
    for p in out.glob("data-*.arrow"):
        if p.name not in new:
            p.unlink()
    # Data files first, state.json last: a reader sees the old dataset or the new one's files complete.
    for name in sorted(new, key=lambda n: n == "state.json"):
        os.replace(tmp / name, out / name)
    tmp.rmdir()
    fsync_dir(out)
    return out
