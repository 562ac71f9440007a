"""Feed a `fleetgen export --format speculators` file to speculators' own loader and compare what it kept.

speculators is not a fleetgen dependency; install it beside the project's environment without its
dependencies (it pins torch/torchvision), for example:
    pip install --no-deps --target /tmp/spec-pkg speculators==0.9.0 hs-connectors==0.9.0
    PYTHONPATH=/tmp/spec-pkg:src python bench/speculators_compat.py EXPORT.jsonl MODEL_DIR
It runs speculators.data_generation.preprocessing.load_and_preprocess_dataset (what
`speculators prepare-data` calls), then checks every row it returns against the export.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("export", type=Path)
    ap.add_argument("model", help="the target model directory (speculators loads its processor)")
    ap.add_argument("--seq-length", type=int, default=4096)
    a = ap.parse_args()

    from importlib.metadata import version

    from speculators.data_generation.preprocessing import load_and_preprocess_dataset

    ours = [json.loads(line) for line in a.export.read_text().splitlines() if line.strip()]
    ds, _ = load_and_preprocess_dataset(
        a.model, [str(a.export)], seq_length=a.seq_length, build_dataset_num_proc=1, skip_token_freq=True
    )
    theirs = {
        tuple(r["input_ids"].tolist() if hasattr(r["input_ids"], "tolist") else r["input_ids"]): list(
            r["loss_mask"].tolist() if hasattr(r["loss_mask"], "tolist") else r["loss_mask"]
        )
        for r in ds
    }
    kept = sum(1 for r in ours if tuple(r["input_ids"]) in theirs)
    same_mask = sum(1 for r in ours if theirs.get(tuple(r["input_ids"])) == r["loss_mask"])
    print(
        f"speculators {version('speculators')}: exported rows {len(ours)}, "
        f"loader rows {len(ds)}, rows kept with identical input_ids {kept}, identical loss_mask {same_mask}"
    )
    print(f"loader columns: {ds.column_names}")
    return 0 if kept == same_mask == len(ours) == len(ds) else 1


if __name__ == "__main__":
    sys.exit(main())
