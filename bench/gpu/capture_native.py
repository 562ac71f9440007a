"""Capture a real SGLang server's answers on the routes fleetgen's native path uses, as test fixtures.

Usage: python3 bench/gpu/capture_native.py http://127.0.0.1:30000 OUTDIR
Writes OUTDIR/NN-name.json, each {name, path, request, http_status, elapsed_s, response}: /server_info,
/v1/tokenize (plain, tools, thinking off), /generate on the rendered ids (greedy; a sampled one would wait
minutes on flashinfer's first-use compile),
/separate_reasoning (closed, open, no tags), /parse_function_call (a call, parallel calls, none),
and the chat answer for the same greedy prompt (with return_token_ids). Needs only the standard library.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "Local time in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    },
]
USER = [{"role": "user", "content": "Write one sentence about the sea."}]
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
CALL2 = '<tool_call>\n{"name": "get_time", "arguments": {"city": "Rome"}}\n</tool_call>'


def call(ep: str, method: str, path: str, body: dict | None = None) -> tuple[int | None, object, float]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(ep + path, data=data, method=method, headers={"Content-Type": "application/json"})
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            raw, status = r.read(), r.status
    except urllib.error.HTTPError as e:
        raw, status = e.read(), e.code
    except Exception as e:  # noqa: BLE001 - a capture records whatever happened
        return None, {"error": repr(e)}, time.monotonic() - t0
    try:
        payload: object = json.loads(raw)
    except ValueError:
        payload = {"raw": raw.decode("utf-8", "replace")}
    return status, payload, time.monotonic() - t0


def main() -> None:
    ep, out = sys.argv[1], Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    n = 0

    def save(name: str, method: str, path: str, body: dict | None = None) -> object:
        nonlocal n
        n += 1
        status, payload, dt = call(ep, method, path, body)
        rec = {
            "name": name,
            "path": path,
            "request": body,
            "http_status": status,
            "elapsed_s": round(dt, 3),
            "response": payload,
        }
        (out / f"{n:02d}-{name}.json").write_text(json.dumps(rec, indent=1))
        print(f"{n:02d} {name}: HTTP {status} in {dt:.3f}s: {json.dumps(payload)[:200]}")
        return payload

    info = save("server_info", "GET", "/server_info")
    model = info.get("served_model_name") if isinstance(info, dict) else None
    model = model or "default"
    tok = save("tokenize_plain", "POST", "/v1/tokenize", {"model": model, "messages": USER})
    save(
        "tokenize_thinking_off",
        "POST",
        "/v1/tokenize",
        {"model": model, "messages": USER, "chat_template_kwargs": {"enable_thinking": False}},
    )
    save(
        "tokenize_tools",
        "POST",
        "/v1/tokenize",
        {
            "model": model,
            "messages": [{"role": "user", "content": "Weather in Paris?"}],
            "tools": TOOLS,
            "tool_choice": "auto",
        },
    )
    save(
        "chat_greedy_token_ids",
        "POST",
        "/v1/chat/completions",
        {
            "model": model,
            "messages": USER,
            "max_tokens": 16,
            "temperature": 0,
            "return_token_ids": True,
            "return_prompt_token_ids": True,
        },
    )
    ids = tok.get("tokens") if isinstance(tok, dict) else None
    if isinstance(ids, list):
        save(
            "generate_greedy",
            "POST",
            "/generate",
            {"input_ids": ids, "sampling_params": {"max_new_tokens": 16, "temperature": 0}},
        )
    parser = info.get("reasoning_parser") if isinstance(info, dict) else None
    for name, text in [
        ("closed", "<think>The user wants a sentence.</think>The sea is wide."),
        ("open_only", "The user wants a sentence.</think>The sea is wide."),
        ("unclosed", "<think>The user wants"),
        ("no_tags", "The sea is wide."),
    ]:
        save(
            f"separate_reasoning_{name}",
            "POST",
            "/separate_reasoning",
            {"text": text, "reasoning_parser": parser or "qwen3"},
        )
    tparser = info.get("tool_call_parser") if isinstance(info, dict) else None
    for name, text in [
        ("one_call", "Let me check. " + CALL),
        ("parallel", CALL + "\n" + CALL2),
        ("none", "It is sunny in Paris."),
    ]:
        save(
            f"parse_function_call_{name}",
            "POST",
            "/parse_function_call",
            {"text": text, "tools": TOOLS, "tool_call_parser": tparser or "qwen25"},
        )


if __name__ == "__main__":
    main()
