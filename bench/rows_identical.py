"""Two source trees, the same prompts, the NULL SERVER (or real
servers): are the rows identical (but timing and replica)?

A check that a change leaves the data alone where its semantics were already right: 600 prompts x
2 samples, seed 7, through `generate()` of each tree in its own process. Six kinds of prompt:
single-turn; system + multi-turn; a recorded get_weather(Paris) call that the null server (run with
`--tool-call`) makes too, so its result is kept; the same call recorded without tool definitions,
so the null server answers instead (an answered_without_call cut); a recorded call of other
arguments (an other_arguments cut); a trailing assistant turn.

    .venv/bin/python bench/rows_identical.py BASE_SRC BRANCH_SRC [--ignore token_ids.why ...]
        [--profiles '[{"name": "cold", "temperature": 0.3, "top_k": 20}, ...]'] [--rows 600]
        [--endpoint URL ... --concurrency 8 --max-tokens 16]

`--ignore A.B` leaves field B of field A out of both sides' rows (a field the branch adds on purpose).
`--profiles` runs the job with these sampling profiles (each row records its profile and what was sent).
`--endpoint` drives servers already running (a real engine: `fleetgen up`, a tool-call parser for the
tool kinds) instead of the null server; the model is the first one they list. A real engine's answer
may depend on what it batched the request with: `--concurrency 1` and the base tree run twice
(BASE_SRC BASE_SRC) show whether a difference is the engine's own before it is blamed on the branch.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import orjson

HERE = Path(__file__).resolve().parent
TOOL = {
    "type": "function",
    "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
}
CHILD = """
import json, sys
from pathlib import Path
from fleetgen.generate import GenerateConfig, generate
cfg = GenerateConfig(prompts=Path(sys.argv[1]), output_dir=Path(sys.argv[2]), samples=2, seed=7, hedge=True,
                     **json.loads(sys.argv[3]))
print(generate(cfg, handle_signals=False).ok)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _row(i: int) -> dict:
    kind = i % 6
    if kind == 0:
        return {"id": f"p{i}", "messages": [{"role": "user", "content": f"color {i}"}]}
    if kind == 1:
        return {
            "id": f"p{i}",
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": f"q {i}"},
                {"role": "assistant", "content": "a"},
                {"role": "user", "content": "again"},
            ],
        }
    if kind == 2:
        call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}
        return {
            "id": f"p{i}",
            "tools": [TOOL],
            "messages": [
                {"role": "user", "content": f"weather {i}"},
                {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
                {"role": "assistant", "content": "It is sunny."},
            ],
        }
    if kind in (4, 5):
        city = "Paris" if kind == 4 else "Rome"
        call = {
            "id": "c1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": f'{{"city":"{city}"}}'},
        }
        row = {
            "id": f"p{i}",
            "messages": [
                {"role": "user", "content": f"weather {i}"},
                {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
                {"role": "assistant", "content": "It is sunny."},
            ],
        }
        return row if kind == 4 else {**row, "tools": [TOOL]}
    return {
        "id": f"p{i}",
        "messages": [{"role": "user", "content": f"x {i}"}, {"role": "assistant", "content": "y"}],
        "meta": {"domain": "chat"},
    }


def _rows(src: str, prompts: Path, out: Path, job: dict, ignore: list[str] = ()) -> list[bytes]:
    """The results of one tree's run, without the fields that differ between any two runs."""
    run = subprocess.run(
        [sys.executable, "-c", CHILD, str(prompts), str(out), json.dumps(job)],
        env={**os.environ, "PYTHONPATH": src},
        capture_output=True,
        text=True,
    )
    if run.returncode:
        raise SystemExit(run.stderr[-2000:])
    rows = [orjson.loads(line) for line in open(out / "results.jsonl", "rb")]
    for row in rows:
        row.pop("timing")
        row.pop("replica")
        row.pop("job", None)  # the job identity's digest (rows/history.py): absent from trees before it
        for m in row["messages"]:  # a call the target made has the id its server drew (vLLM: random per request)
            for call in m.get("tool_calls") or ():
                if str(call.get("id", "")).startswith("chatcmpl-tool-"):
                    call["id"] = "chatcmpl-tool-(drawn by the server)"
        for path in ignore:
            *parents, last = path.split(".")
            node = row
            for key in parents:
                node = node.get(key) if isinstance(node, dict) else None
            if isinstance(node, dict):
                node.pop(last, None)
    errors = out / "errors.jsonl"
    print(f"{src}: {len(rows)} rows, {errors.stat().st_size if errors.exists() else 0} error bytes")
    return sorted(orjson.dumps(row, option=orjson.OPT_SORT_KEYS) for row in rows)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("base")
    ap.add_argument("branch")
    ap.add_argument("--ignore", action="append", default=[])
    ap.add_argument("--profiles", type=json.loads, default=[])
    ap.add_argument("--rows", type=int, default=600)
    ap.add_argument("--endpoint", action="append", default=[])
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=16)
    args = ap.parse_args()
    server = None
    endpoints = args.endpoint
    if not endpoints:
        ports = [_free_port() for _ in range(4)]
        server = subprocess.Popen(
            [sys.executable, str(HERE / "null_server.py"), "--tool-call", "--ports", *map(str, ports)]
        )
        endpoints = [f"http://127.0.0.1:{p}" for p in ports]
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(endpoints[-1] + "/health")
                break
            except OSError:
                time.sleep(0.1)
        model = (
            "null"
            if server
            else json.loads(urllib.request.urlopen(endpoints[0] + "/v1/models").read())["data"][0]["id"]
        )
        job = {
            "endpoints": endpoints,
            "model": model,
            "max_tokens": args.max_tokens,
            "concurrency": args.concurrency,
            "profiles": args.profiles,
        }
        with tempfile.TemporaryDirectory() as d:
            prompts = Path(d) / "prompts.jsonl"
            prompts.write_bytes(b"".join(orjson.dumps(_row(i)) + b"\n" for i in range(args.rows)))
            a = _rows(args.base, prompts, Path(d) / "base", job, args.ignore)
            b = _rows(args.branch, prompts, Path(d) / "branch", job, args.ignore)
    finally:
        if server is not None:
            server.kill()
            server.wait()
    ignore = args.ignore
    cuts = {
        r: sum(f'"reason":"{r}"'.encode() in row for row in a) for r in ("answered_without_call", "other_arguments")
    }
    kept = sum(b'"role":"tool"' in row for row in a)
    left_out = "".join(f", {p}" for p in ignore)
    print(
        f"identical but timing and replica{left_out}: {a == b} ({len(a)} rows, {kept} with a kept tool result, cuts "
        f"{cuts})"
    )
    if a != b:
        diff = [(x, y) for x, y in zip(a, b) if x != y]
        print(f"{len(diff)} rows differ; first:\n  base:   {diff[0][0][:600]!r}\n  branch: {diff[0][1][:600]!r}")
    sys.exit(0 if a == b else 1)


if __name__ == "__main__":
    main()
