"""The engine's own ceiling: SGLang's offline Engine on a race's workload, no HTTP, no tokenizer round trip.

    python3 bench/gpu/engine_ceiling.py MODEL PROMPTS.jsonl N MEM_FRACTION [SAMPLES] [MAX_TOKENS]

The first N prompt records, each SAMPLES times (4), MAX_TOKENS (128) answers at T 0.8, top_p 0.9, thinking off,
as the fleetgen and plain arms of bench/gpu/speed.sh and steady.sh send them. Times generate() alone, after a
warm-up batch and a cache flush; prints one JSON line.
"""

import json
import sys
import time

import sglang as sgl
from transformers import AutoTokenizer


def main() -> None:
    model, prompts, n, mem = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    samples = int(sys.argv[5]) if len(sys.argv) > 5 else 4
    max_tokens = int(sys.argv[6]) if len(sys.argv) > 6 else 128
    tok = AutoTokenizer.from_pretrained(model)
    rows = [json.loads(line) for line in open(prompts) if line.strip()][:n]
    ids = []
    for row in rows:
        p = tok.apply_chat_template(row["messages"], tokenize=True, add_generation_prompt=True, enable_thinking=False)
        p = p["input_ids"] if hasattr(p, "keys") else p
        ids += [list(p)] * samples
    engine = sgl.Engine(
        model_path=model,
        attention_backend="flashinfer",
        grammar_backend="none",
        mem_fraction_static=mem,
        log_level="error",
    )
    sampling = {"temperature": 0.8, "top_p": 0.9, "max_new_tokens": max_tokens}
    engine.generate(input_ids=ids[:512], sampling_params=sampling)
    engine.flush_cache()
    t = time.time()
    out = engine.generate(input_ids=ids, sampling_params=sampling)
    wall = time.time() - t
    tokens = sum(o["meta_info"]["completion_tokens"] for o in out)
    print(
        json.dumps(
            {
                "arm": "engine offline",
                "requests": len(out),
                "tokens": tokens,
                "wall_s": round(wall, 2),
                "tok_s": round(tokens / wall, 1),
            }
        )
    )
    engine.shutdown()


if __name__ == "__main__":  # the engine spawns its scheduler: the module must not run on import
    main()
