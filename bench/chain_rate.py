"""The token-id chain rate of multi-turn tool samples on the REAL engine, for two source trees.

A turn "chains" when the prompt ids the server was fed extend the previous turn's prompt + sampled
ids exactly (generate/dispatch/answer_ids.py `reuse` equals their length): the history re-sends what the
target saw and sampled, the exports write the conversation once, and the engine's prefix cache
holds it. A history that drops a tool step's reasoning where the template renders it breaks the
chain at every such step (issue 24, item 3).

One vLLM-CPU replica serving SmolLM2-135M with bench/templates/smollm2_think_tools.jinja (ChatML,
Qwen3's rule for reasoning in the history, the generation prompt opening <think>, worked examples
of think-then-call) and vLLM's `olmo3` (text) reasoning parser and `hermes` tool parser. The
prompts are recorded tool trajectories (question, get_weather call, result, answer; some with a
second user ask and a second call), tool_match name so the 135M model's city choice does not cut.
Each tree's `generate()` runs in its own process against the same replica:

    .venv/bin/python bench/chain_rate.py BASE_SRC BRANCH_SRC [--prompts 40]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
TEMPLATE = HERE / "templates" / "smollm2_think_tools.jinja"
TEMPERATURE = 0.0
CITIES = ["Paris", "Berlin", "Tokyo", "Oslo", "Lima", "Cairo", "Madrid", "Vienna", "Quito", "Dublin"]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather of a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]
CHILD = """
import sys
from pathlib import Path
from fleetgen.generate import GenerateConfig, generate
cfg = GenerateConfig(prompts=Path(sys.argv[1]), output_dir=Path(sys.argv[2]), fleet_state=Path(sys.argv[3]),
                     max_tokens=96, temperature=float(sys.argv[5]), seed=1, samples=int(sys.argv[4]),
                     tool_match="name", hedge=False)
print(generate(cfg, handle_signals=False).ok)
"""


def _call(rid: str, k: int, city: str) -> dict:
    return {
        "id": f"{rid}-c{k}",
        "type": "function",
        "function": {"name": "get_weather", "arguments": json.dumps({"city": city})},
    }


def _row(i: int) -> dict:
    rid, a, b = f"t{i}", CITIES[i % len(CITIES)], CITIES[(i * 3 + 1) % len(CITIES)]
    msgs = [
        {"role": "user", "content": f"What is the weather in {a}?"},
        {"role": "assistant", "content": "", "tool_calls": [_call(rid, 1, a)]},
        {"role": "tool", "content": f"{a}: sunny, 21C", "tool_call_id": f"{rid}-c1"},
        {"role": "assistant", "content": f"It is sunny in {a}."},
    ]
    if i % 2:
        msgs += [
            {"role": "user", "content": f"And in {b}?"},
            {"role": "assistant", "content": "", "tool_calls": [_call(rid, 2, b)]},
            {"role": "tool", "content": f"{b}: cloudy, 9C", "tool_call_id": f"{rid}-c2"},
            {"role": "assistant", "content": f"It is cloudy in {b}."},
        ]
    return {"id": rid, "tools": TOOLS, "messages": msgs}


def chain_counts(rows: list[dict]) -> dict[str, int]:
    """Turns after a sample's first: how many chain; of those after a tool result, how many chain."""
    sys.path.insert(0, str(HERE.parent / "src"))
    from fleetgen.rows.token_ids import recorded_turns

    out = {
        "samples": len(rows),
        "turns": 0,
        "later": 0,
        "chained": 0,
        "after_tool": 0,
        "after_tool_chained": 0,
        "with_reasoning": 0,
        "cut": sum(r.get("cut") is not None for r in rows),
    }
    for r in rows:
        turns = recorded_turns(r) or []
        msgs = r["messages"]
        at = [i for i, m in enumerate(msgs) if m["role"] == "assistant"]
        out["turns"] += len(at)
        out["with_reasoning"] += sum(bool(msgs[i].get("reasoning_content")) for i in at)
        for k in range(1, len(turns)):
            prev, cur = turns[k - 1], turns[k]
            if prev is None or cur is None:
                continue
            full = prev.prompt + prev.completion
            chained = cur.prompt[: len(full)] == full
            out["later"] += 1
            out["chained"] += chained
            if msgs[at[k] - 1]["role"] == "tool":
                out["after_tool"] += 1
                out["after_tool_chained"] += chained
    return out


def _run(src: str, prompts: Path, out: Path, state: Path, samples: int) -> dict[str, int]:
    run = subprocess.run(
        [sys.executable, "-c", CHILD, str(prompts), str(out), str(state), str(samples), str(TEMPERATURE)],
        env={**os.environ, "PYTHONPATH": src},
        capture_output=True,
        text=True,
    )
    if run.returncode:
        raise SystemExit(run.stderr[-3000:])
    notes = [line for line in run.stderr.splitlines() if line.startswith("note: history_reasoning")]
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    counts = chain_counts(rows)
    print(f"{src}: {notes[0] if notes else '(no history_reasoning note: the tree predates it)'}")
    return counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base")
    ap.add_argument("branch")
    ap.add_argument("--prompts", type=int, default=40)
    ap.add_argument("--keep", type=Path, help="copy each tree's results here (DIR/base, DIR/branch)")
    ap.add_argument("--samples", type=int, default=1)
    ap.add_argument("--temperature", type=float, default=0.0)
    a = ap.parse_args()
    global TEMPERATURE
    TEMPERATURE = a.temperature
    sys.path.insert(0, str(HERE.parent / "src"))
    sys.path.insert(0, str(HERE.parent / "tests"))
    from real_fleet import start_fleet

    from fleetgen.fleet.stop import down

    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        state = d / "fleet"
        start_fleet(
            state,
            1,
            tool_call_parser="hermes",
            engine_args=["--chat-template", str(TEMPLATE), "--reasoning-parser", "olmo3"],
        )
        try:
            prompts = d / "p.jsonl"
            prompts.write_text("".join(json.dumps(_row(i)) + "\n" for i in range(a.prompts)))
            results = {
                name: _run(src, prompts, d / name, state, a.samples)
                for name, src in (("base", a.base), ("branch", a.branch))
            }
            if a.keep:
                import shutil

                for name in results:
                    shutil.copytree(d / name, a.keep / name, dirs_exist_ok=True)
        finally:
            down(state)
    print("| tree | samples | turns | with reasoning | cut | later turns chained | after a tool result chained |")
    print("|---|---|---|---|---|---|---|")
    for name, c in results.items():
        rate = c["chained"] / c["later"] if c["later"] else 0.0
        tool_rate = c["after_tool_chained"] / c["after_tool"] if c["after_tool"] else 0.0
        print(
            f"| {name} | {c['samples']} | {c['turns']} | {c['with_reasoning']} | {c['cut']} | "
            f"{c['chained']}/{c['later']} ({rate:.0%}) | {c['after_tool_chained']}/{c['after_tool']} ({tool_rate:.0%}) "
            "|"
        )


if __name__ == "__main__":
    main()
