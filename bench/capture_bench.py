#!/usr/bin/env python3
"""fleetgen capture's transformers backend against a plain transformers loop over the same ids: tokens/s.

Arms (each over the same rows, after one warm-up batch):
- plain: for each row, `model(ids, output_hidden_states=True)`, the layers' states stacked and moved to the
  host (batch 1; what a one-off script does);
- fleetgen: capture's hooked forward (capture/forward.py: no LM head, stops after the deepest layer) over rows
  batched by length up to --batch-tokens, each row encoded (bf16 or fp8) and, unless --no-write, written as
  its speculators file whole (temp, fsync, rename), as `fleetgen capture --backend transformers` does; the
  next batch's forward runs while a writer thread writes the last one's files (--no-write: encode only).
Rows: --results DIR (a generate output: each record's recorded ids, prompt + completion of its last turn) or
synthesized ids (--rows N, lengths uniform in [--min-len, --max-len], seeded).

Needs torch, transformers and safetensors, and this repository's src/ (no other dependency; no vLLM):
  python3 bench/capture_bench.py --model /tmp/model --device cuda --rows 256 --min-len 512 --max-len 2048
  python3 bench/capture_bench.py --model ~/.cache/fleetgen/models/SmolLM2-135M-Instruct --rows 16 --max-len 256
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def eagle3(n: int) -> list[int]:
    return [2, n // 2, n - 3, n]


def rows_from_results(path: Path, limit: int) -> list[list[int]]:
    from fleetgen.rows.token_ids import recorded_turns

    rows: list[list[int]] = []
    for name in sorted(path.glob("results*.jsonl")):
        for line in name.read_text(encoding="utf-8").splitlines():
            turns = recorded_turns(json.loads(line)) if line.strip() else None
            if turns and turns[-1] is not None:
                rows.append(turns[-1].prompt + turns[-1].completion)
            if len(rows) >= limit:
                return rows
    return rows


def synthesized(n: int, lo: int, hi: int, vocab: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(1, vocab) for _ in range(rng.randint(lo, hi))] for _ in range(n)]


def sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def plain(model, rows: list[list[int]], layers: list[int], device: str) -> None:
    import torch

    with torch.inference_mode():
        for ids in rows:
            out = model(torch.tensor([ids], device=device), output_hidden_states=True)
            torch.stack([out.hidden_states[k][0] for k in layers], dim=1).to("cpu")


def length_batches(rows: list[list[int]], batch_tokens: int) -> list[list[int]]:
    """Row indices grouped by length, each batch at most batch_tokens padded tokens (as the backend does)."""
    order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
    batches, cur = [], []
    for i in order:
        if cur and len(rows[i]) * (len(cur) + 1) > batch_tokens:
            batches.append(cur)
            cur = []
        cur.append(i)
    return batches + ([cur] if cur else [])


def fleetgen(fwd, rows, batch_tokens: int, dtype: str, out: Path | None) -> None:
    """Forward batch k+1 while a writer thread writes batch k's files (as the backend overlaps them);
    encoded on the model's device (fp8's scales are a reduction per token), then moved to the host."""
    from concurrent.futures import ThreadPoolExecutor

    from fleetgen.capture.tensors import encode, write_file

    def write(items: list[tuple[int, dict]]) -> None:
        for k, tensors in items:
            host = {name: t.to("cpu") for name, t in tensors.items()}
            if out is not None:
                write_file(out / f"hs_{k}.safetensors", host)

    k = 0
    pending = None
    with ThreadPoolExecutor(1) as writer:
        for batch in length_batches(rows, batch_tokens):
            encoded = []
            for i, hs in zip(batch, fwd([rows[i] for i in batch], to_host=False), strict=True):
                encoded.append((k, encode(hs, rows[i], dtype)))
                k += 1
            if pending is not None:
                pending.result()  # one batch written at a time: memory stays bounded
            pending = writer.submit(write, encoded)
        if pending is not None:
            pending.result()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="model directory")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--results", type=Path, help="a generate output directory with recorded ids")
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--min-len", type=int, default=256)
    ap.add_argument("--max-len", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch-tokens", type=int, default=16384)
    ap.add_argument("--dtype", choices=("bf16", "fp8"), default="bf16")
    ap.add_argument("--layers", default="eagle3", help="eagle3 or a list like 2,18,33,36")
    ap.add_argument("--no-write", action="store_true", help="fleetgen arm: encode but do not write files")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each arm, in A B B A order when 2")
    args = ap.parse_args()

    import torch
    import transformers

    from fleetgen.capture.forward import HiddenStateForward, load_model

    model = load_model(args.model, args.device)
    n = model.config.num_hidden_layers
    layers = eagle3(n) if args.layers == "eagle3" else sorted(int(x) for x in args.layers.split(","))
    rows = (
        rows_from_results(args.results, args.rows)
        if args.results
        else synthesized(args.rows, args.min_len, args.max_len, model.config.vocab_size, args.seed)
    )
    tokens = sum(map(len, rows))
    fwd = HiddenStateForward(model, layers)
    # Warm-up: kernels, allocator, (on GPU) cuBLAS handles; not timed.
    plain(model, rows[:2], [k for k in layers if k < n] + [n], args.device)
    fwd(rows[:2])
    sync(args.device)

    def run(arm: str) -> float:
        with tempfile.TemporaryDirectory() as tmp:
            sync(args.device)
            t0 = time.perf_counter()
            if arm == "plain":
                plain(model, rows, layers, args.device)
            else:
                fleetgen(fwd, rows, args.batch_tokens, args.dtype, None if args.no_write else Path(tmp))
            sync(args.device)
            return time.perf_counter() - t0

    order = ["plain", "fleetgen", "fleetgen", "plain"] if args.repeat >= 2 else ["plain", "fleetgen"]
    times: dict[str, list[float]] = {"plain": [], "fleetgen": []}
    for arm in order:
        times[arm].append(run(arm))
    dev = torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else "cpu"
    print(
        f"model {args.model} (N={n}, hidden {model.config.hidden_size}), layers {layers}, {len(rows)} rows, "
        f"{tokens} tokens, device {dev}, torch {torch.__version__}, transformers {transformers.__version__}"
    )
    print(f"{'arm':<10} {'seconds':>9} {'tokens/s':>10} {'vs plain':>9}")
    base = min(times["plain"])
    for arm in ("plain", "fleetgen"):
        best = min(times[arm])
        print(f"{arm:<10} {best:>9.2f} {tokens / best:>10.0f} {base / best:>8.2f}x")
    what = "encoded only" if args.no_write else f"{args.dtype} files written (fsync)"
    print(f"fleetgen arm: batches of <= {args.batch_tokens} padded tokens, {what}; best of {len(times['plain'])}")


if __name__ == "__main__":
    main()
