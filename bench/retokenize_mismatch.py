"""How often re-tokenized text differs from the tokens the target sampled, on a real fleet.

Runs `fleetgen generate` (token ids on) for N single-turn prompts at each temperature, then for
every turn compares the sampled completion ids with
  (a) the re-encoding of their decoded text (fleetgen.export.fidelity), and
  (b) the supervised ids of the tokens export's text path (what `--format tokens` wrote before it
      used the ids: the conversation re-rendered through the chat template and re-encoded).
A turn differs when the id lists differ; tokens affected are the sampled ids outside the longest
matching blocks. Also checks decode(sampled ids) == the recorded text for every turn.

Usage: PYTHONPATH=src .venv/bin/python bench/retokenize_mismatch.py --fleet STATE_DIR \
           [--rows 300] [--max-tokens 64] [--temperatures 0.8 1.0] [--seed 0] [--out
           bench/results/retokenize_mismatch.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

import orjson

from fleetgen.export.config import ExportConfig
from fleetgen.export.fidelity import Mismatch, affected, record_mismatch
from fleetgen.export.formats.base import RowRejected
from fleetgen.export.formats.tokens import TokensFormat, load_tokenizer
from fleetgen.export.results import iter_results
from fleetgen.generate import GenerateConfig, generate
from fleetgen.rows.token_ids import recorded_turns

ROOT = Path(__file__).resolve().parents[1]
TOPICS = [
    "pianists",
    "volcanoes",
    "the French revolution",
    "photosynthesis",
    "sourdough bread",
    "black holes",
    "chess openings",
    "the Roman empire",
    "electric cars",
    "honeybees",
    "jazz",
    "quantum computing",
    "the Amazon river",
    "origami",
    "vaccines",
    "medieval castles",
    "coffee",
    "glaciers",
    "Shakespeare",
    "bicycles",
    "the stock market",
    "octopuses",
    "solar panels",
    "the Silk Road",
    "tea ceremonies",
    "earthquakes",
    "impressionist painting",
    "marathon running",
    "the printing press",
    "coral reefs",
    "submarines",
    "Python programming",
    "wolves",
    "the Moon landing",
    "cheese making",
    "hurricanes",
    "violins",
    "ancient Egypt",
    "recycling",
    "dinosaurs",
    "the human heart",
    "skyscrapers",
    "penguins",
    "classical music",
    "rainforests",
    "typewriters",
    "the Olympics",
    "mushrooms",
    "lighthouses",
    "comets",
]
TASKS = [
    "Write two sentences about {t}.",
    "Give three facts about {t}.",
    "Explain {t} to a child.",
    "Write a short poem about {t}.",
    "What is surprising about {t}?",
    "Describe {t} in one paragraph.",
]


def write_prompts(path: Path, n: int) -> None:
    with open(path, "wb") as f:
        for i in range(n):
            t, task = TOPICS[i % len(TOPICS)], TASKS[(i // len(TOPICS)) % len(TASKS)]
            f.write(orjson.dumps({"id": f"p{i}", "messages": [{"role": "user", "content": task.format(t=t)}]}) + b"\n")


def strip_special(ids: list[int], special: set[int]) -> list[int]:
    ids = list(ids)
    while ids and ids[-1] in special:
        ids.pop()
    return ids


def measure(outdir: Path, tok, export_dir: Path) -> dict:
    fmt = TokensFormat(ExportConfig(results_dir=outdir, output=export_dir / "x.parquet", format="tokens"), tok)
    reenc, text_path = Mismatch(), Mismatch()
    rejected = decode_differs = 0
    special = set(tok.all_special_ids)
    example = None
    for rec in iter_results(outdir):
        m = record_mismatch(rec, tok)
        reenc.add(m)
        turns = recorded_turns(rec) or []
        answers = [x for x in rec["messages"] if x.get("role") == "assistant"]
        for t, msg in zip(turns, answers):
            if t is not None and tok.decode(t.completion, skip_special_tokens=True) != (msg.get("content") or ""):
                decode_differs += 1
        if example is None and m.turns_differing and turns and turns[0] is not None:
            ids = strip_special(turns[0].completion, special)
            again = tok(tok.decode(ids, skip_special_tokens=False), add_special_tokens=False)["input_ids"]
            for i, (a, b) in enumerate(zip(ids, again)):
                if a != b:
                    example = {
                        "sampled": tok.convert_ids_to_tokens(ids[i : i + 3]),
                        "re-encoded": tok.convert_ids_to_tokens(again[i : i + 3]),
                    }
                    break
        try:
            rows = fmt.text_rows(rec)
        except RowRejected:
            rejected += 1
            continue
        if len(rows) != 1 or turns[0] is None:
            continue
        row = rows[0]
        # Both without the closing special token: a turn cut by max_tokens sampled none, the template adds one.
        supervised = strip_special([i for i, k in zip(row["input_ids"], row["loss_mask"]) if k], special)
        sampled = strip_special(turns[0].completion, special)
        text_path.add(Mismatch(1, int(supervised != sampled), len(sampled), affected(sampled, supervised)))
    return {
        "turns": reenc.turns,
        "reencode": {
            "turns_differing": reenc.turns_differing,
            "turn_share": round(reenc.turn_share, 4),
            "tokens": reenc.tokens,
            "tokens_affected": reenc.tokens_affected,
            "token_share": round(reenc.token_share, 4),
        },
        "text_path": {
            "turns": text_path.turns,
            "turns_differing": text_path.turns_differing,
            "turn_share": round(text_path.turn_share, 4),
            "tokens_affected": text_path.tokens_affected,
            "token_share": round(text_path.token_share, 4),
            "rejected_by_round_trip": rejected,
        },
        "decode_differs_from_text": decode_differs,
        "example": example,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fleet", type=Path, required=True)
    ap.add_argument("--rows", type=int, default=300)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--temperatures", type=float, nargs="+", default=[0.8, 1.0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tokenizer", default="smollm2")
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/retokenize_mismatch.json")
    a = ap.parse_args()
    tok = load_tokenizer(a.tokenizer)
    results = {
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "rows": a.rows,
        "max_tokens": a.max_tokens,
        "seed": a.seed,
        "runs": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        prompts = Path(tmp) / "prompts.jsonl"
        write_prompts(prompts, a.rows)
        for temp in a.temperatures:
            outdir = Path(tmp) / f"t{temp}"
            t0 = time.time()
            cfg = GenerateConfig(
                prompts=prompts,
                output_dir=outdir,
                fleet_state=a.fleet,
                max_tokens=a.max_tokens,
                temperature=temp,
                seed=a.seed,
            )
            stats = generate(cfg)
            r = measure(outdir, tok, Path(tmp))
            r["wall_s"] = round(time.time() - t0, 1)
            r["turns_without_ids"] = stats.turns_without_ids
            results["runs"][str(temp)] = r
    print(
        f"{'temperature':>11} {'turns':>6} {'re-encode differs':>18} {'tokens affected':>16} "
        f"{'text path differs':>18} {'tokens affected':>16} {'decode!=text':>12}"
    )
    for temp, r in results["runs"].items():
        e, t = r["reencode"], r["text_path"]
        print(
            f"{temp:>11} {r['turns']:>6} {e['turns_differing']:>6} ({100 * e['turn_share']:5.1f}%) "
            f"{e['tokens_affected']:>6} ({100 * e['token_share']:5.2f}%) "
            f"{t['turns_differing']:>6} ({100 * t['turn_share']:5.1f}%) {t['tokens_affected']:>6} "
            f"({100 * t['token_share']:5.2f}%) "
            f"{r['decode_differs_from_text']:>12}"
        )
        if r["example"]:
            print(f"{'':>11} e.g. sampled {r['example']['sampled']} re-encoded {r['example']['re-encoded']}")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
