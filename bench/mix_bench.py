"""Benchmark `fleetgen mix`: normalize + dedup + quota + write over N synthetic rows in four real schemas.

    python bench/mix_bench.py --rows 1000000 --workdir /tmp/mixbench

Writes the sources once (Infinity-Instruct, CodeFeedback, MetaMathQA with AnsAug repeats, and
Hermes function calling; ~4% exact and ~3% near duplicates), then times `build_mix` for the
seed's six-domain quotas (total 193000) and prints the phase times and peak RSS as JSON.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import time
from pathlib import Path

STOP = "the a of to and in is for on with how what why can you please explain".split()
VOCAB = [
    f"{a}{b}{c}"
    for a in "bcdfgklmnprstvz"
    for b in ("a", "e", "i", "o", "u", "ai", "ou")
    for c in ("n", "r", "s", "t", "l", "m", "nd", "rt", "st", "x")
]
SHARES = {"infinity": 0.45, "codefeedback": 0.22, "metamath": 0.25, "hermes": 0.08}
LABELS = [
    ["Life knowledge and skills"],
    ["Stem knowledge"],
    ["Mathematical ability"],
    ["Programming and software development"],
    ["Literary creation and artistic knowledge"],
    ["Logic and reasoning"],
]
TOOLS = (
    "[{'type': 'function', 'function': {'name': 'get_%s', 'description': 'Look up %s', 'parameters': "
    "{'type': 'object', 'properties': {'q': {'type': 'string'}, 'exact': {'type': 'boolean', 'default': True}}, "
    "'required': ['q']}}}]"
)


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(STOP) if rng.random() < 0.35 else rng.choice(VOCAB) for _ in range(n))


def generate(workdir: Path, rows: int, seed: int = 0) -> dict[str, Path]:
    rng = random.Random(seed)
    workdir.mkdir(parents=True, exist_ok=True)
    paths = {}
    recent: list[str] = []

    def text() -> str:
        r = rng.random()
        if recent and r < 0.04:
            return rng.choice(recent)  # exact duplicate (possibly across sources)
        if recent and r < 0.07:
            return "Question: " + rng.choice(recent)  # near duplicate
        t = sentence(rng, rng.randint(25, 90)) + "?"
        if len(recent) < 5000:
            recent.append(t)
        else:
            recent[rng.randrange(5000)] = t
        return t

    for name, share in SHARES.items():
        n = int(rows * share)
        p = workdir / f"{name}.jsonl"
        paths[name] = p
        with p.open("w") as fh:
            for i in range(n):
                if name == "infinity":
                    row = {
                        "id": str(i),
                        "conversations": [{"from": "human", "value": text()}, {"from": "gpt", "value": "ok"}],
                        "label": {
                            "ability_en": [],
                            "ability_zh": [],
                            "cate_ability_en": rng.choice(LABELS),
                            "cate_ability_zh": [],
                        },
                        "langdetect": "en",
                        "source": "Subjective",
                    }
                elif name == "codefeedback":
                    row = {
                        "query": "Write a function: " + text(),
                        "answer": "def f(): pass",
                        "resource": "magicoder",
                        "lang": "python",
                    }
                elif name == "metamath":
                    oq = f"original question number {i // 4}"  # groups of 4 augmentations
                    row = {
                        "query": text(),
                        "response": "The answer is: 1",
                        "type": "GSM_AnsAug",
                        "original_question": oq,
                    }
                else:
                    tool = rng.choice(VOCAB)
                    row = {
                        "id": f"h{i}",
                        "conversations": [
                            {
                                "from": "system",
                                "value": (
                                    f"You are a function calling AI model.\n<tools>\n{TOOLS % (tool, tool)}\n</tools>"
                                ),
                            },
                            {"from": "human", "value": text()},
                            {
                                "from": "gpt",
                                "value": "<tool_call>\n{'arguments': {'q': 'x'}, 'name': 'get_"
                                + tool
                                + "'}\n</tool_call>",
                            },
                        ],
                        "category": "c",
                        "subcategory": "s",
                        "task": "t",
                    }
                fh.write(json.dumps(row) + "\n")
    return paths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/mixbench"))
    ap.add_argument("--total", type=int, default=193_000)
    ap.add_argument("--regenerate", action="store_true", help="rewrite the synthetic sources even if present")
    args = ap.parse_args()

    from fleetgen.config import validate
    from fleetgen.mix import MixRecipe, build_mix

    src_dir = args.workdir / f"sources-{args.rows}"
    t = time.monotonic()
    if args.regenerate or not (src_dir / "hermes.jsonl").exists():
        generate(src_dir, args.rows)
    gen_s = time.monotonic() - t
    recipe = validate(
        MixRecipe,
        {
            "total": args.total,
            "seed": 0,
            "sources": [
                {"name": "infinity", "adapter": "infinity_instruct", "path": str(src_dir / "infinity.jsonl")},
                {"name": "codefeedback", "adapter": "codefeedback", "path": str(src_dir / "codefeedback.jsonl")},
                {
                    "name": "metamath",
                    "adapter": "metamathqa",
                    "path": str(src_dir / "metamath.jsonl"),
                    "max_per_original_question": 2,
                },
                {"name": "hermes", "adapter": "hermes_function_calling", "path": str(src_dir / "hermes.jsonl")},
            ],
            "quotas": {
                "domain": {
                    "general": 0.30,
                    "code": 0.20,
                    "math": 0.20,
                    "stem": 0.12,
                    "tool_use": 0.06,
                    "agent": 0.06,
                    "other": 0.06,
                }
            },
            "filters": {"max_prompt_tokens": 6000, "languages": ["en", "zh"], "drop_near_duplicates": 0.85},
        },
        source="bench",
    )
    marks: list[tuple[float, str]] = []
    t0, c0 = time.monotonic(), time.process_time()
    summary = build_mix(
        recipe,
        args.workdir / "prompts.jsonl",
        args.workdir / "report",
        log=lambda m: marks.append((time.monotonic() - t0, m)),
    )
    total_s, cpu_s = time.monotonic() - t0, time.process_time() - c0
    out = {
        "rows": sum(s.rows_read for s in summary.sources),
        "generate_sources_s": round(gen_s, 1),
        "build_mix_wall_s": round(total_s, 1),
        "build_mix_cpu_s": round(cpu_s, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "written": summary.rows_written,
        "exact_duplicates": sum(s.exact_duplicates for s in summary.sources),
        "near_duplicates": sum(s.near_duplicates for s in summary.sources),
        "capped": sum(s.capped for s in summary.sources),
        "skipped": summary.rows_skipped,
        "phases": [f"{s:7.1f}s {m}" for s, m in marks],
        "domains": summary.domains_selected,
        "notes": summary.notes,
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
