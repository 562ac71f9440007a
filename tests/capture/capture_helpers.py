"""Result directories for the capture tests: rows as generate records them, with token ids (or without)."""

from __future__ import annotations

import json
from pathlib import Path

from fleetgen.rows.token_ids import TurnIds, TurnIdsLog

QUESTIONS = [
    "What is photosynthesis?",
    "Name three prime numbers.",
    "How do I reverse a list in Python?",
    "What is the capital of France?",
    "Explain binary search in one sentence.",
    "Why is the sky blue?",
]
ANSWERS = [
    "Plants turn light into sugar.",
    "2, 3 and 5.",
    "Use my_list[::-1] or my_list.reverse().",
    "The capital of France is Paris.",
    "It halves a sorted range until it finds the value.",
    "Air scatters blue light more than red light.",
]


def record(tok, i: int, sample: int = 0, with_ids: bool = True) -> dict:
    """One result record of a one-turn chat; its ids are the template's prompt and the answer's tokens + EOS."""
    messages = [{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}]
    answer = ANSWERS[(i + sample) % len(ANSWERS)]
    rec = {
        "id": f"q-{i:03d}",
        "sample": sample,
        "messages": [*messages, {"role": "assistant", "content": answer}],
        "tools": None,
        "meta": {"domain": "general"},
        "finish_reason": ["stop"],
        "model": "smollm2",
        "sampling": {"max_tokens": 64, "temperature": 0.8, "reasoning": "save"},
    }
    prompt = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    p = tok(prompt, add_special_tokens=False)["input_ids"]
    c = tok(answer, add_special_tokens=False)["input_ids"] + [tok.convert_tokens_to_ids("<|im_end|>")]
    rec["usage"] = {"prompt_tokens": len(p), "completion_tokens": len(c)}
    if with_ids:
        log = TurnIdsLog()
        log.add(TurnIds(p, c))
        rec["token_ids"] = log.record()
    return rec


def write_results(path: Path, records: list[dict]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    with open(path / "results.jsonl", "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    return path


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
