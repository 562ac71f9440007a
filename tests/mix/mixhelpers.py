"""Helpers of the mix tests: the seed recipe on committed fixtures, and synthetic sources."""

from __future__ import annotations

import json
import random
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "mix"

_VOCAB = [
    f"{a}{b}"
    for a in ("ka", "lo", "mi", "ne", "po", "ru", "si", "ta", "ve", "zo")
    for b in ("bar", "cen", "dor", "fel", "gim", "hap", "jun", "kol", "lum", "mop", "nix", "pur", "qua", "rit", "sul")
]


def write_synthetic(path: Path, n: int, *, seed: int, prefix: str = "") -> Path:
    """n OpenAI-message rows with unrelated random English-looking user prompts (no near duplicates)."""
    rng = random.Random(seed)
    with path.open("w") as fh:
        for i in range(n):
            words = " ".join(rng.choice(_VOCAB) for _ in range(14))
            fh.write(
                json.dumps(
                    {
                        "id": f"{prefix}{i}",
                        "messages": [
                            {"role": "user", "content": f"Please tell me what the {words} is and how it works"},
                            {"role": "assistant", "content": "an answer"},
                        ],
                    }
                )
                + "\n"
            )
    return path


def seed_recipe(fixtures: Path, **over) -> dict:
    """The seed's six-dataset recipe, pointed at the committed fixtures."""
    r = {
        "total": 30,
        "seed": 0,
        "sources": [
            {
                "name": "infinity",
                "adapter": "infinity_instruct",
                "path": str(fixtures / "infinity_instruct_0625.jsonl"),
            },
            {"name": "webinstruct", "adapter": "webinstructsub", "path": str(fixtures / "webinstructsub.jsonl")},
            {
                "name": "codefeedback",
                "adapter": "codefeedback",
                "path": str(fixtures / "codefeedback_filtered_instruction.jsonl"),
            },
            {
                "name": "metamath",
                "adapter": "metamathqa",
                "path": str(fixtures / "metamathqa.json"),
                "max_per_original_question": 2,
            },
            {
                "name": "hermes",
                "adapter": "hermes_function_calling",
                "path": str(fixtures / "hermes_func_calling_singleturn.json"),
            },
            {"name": "agent", "adapter": "agentinstruct", "path": str(fixtures / "agent_sharegpt.jsonl")},
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
    }
    r.update(over)
    return r
