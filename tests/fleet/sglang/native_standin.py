"""A stand-in for SGLang 0.5.12's native routes, run in .venv-sglang: real parsers, captured answers, no model.

- /separate_reasoning and /parse_function_call run SGLang 0.5.12's own ReasoningParser and
  FunctionCallParser, as its http_server.py does (the parsers are pure Python and run on CPU).
- /server_info, /v1/tokenize, /v1/chat/completions and /generate replay the H200 captures in
  fixtures/native-0.5.12 where the request matches one; /generate on ids no capture holds "samples"
  the text given with --script (its ids: one per character, a stand-in's own, so counts stay honest).
- /standin/log lists the bodies received, for tests to check what fleetgen sent.

Usage: .venv-sglang/bin/python native_standin.py --port P --model-path DIR [--script TEXT] [--extra-prompt-token]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

from aiohttp import web

HERE = Path(__file__).resolve().parent
FIX = HERE / "fixtures" / "native-0.5.12"
FLAGS = HERE.parents[2] / "src" / "fleetgen" / "fleet" / "engines" / "sglang_flags.py"


def load_sglang_parsers():
    spec = importlib.util.spec_from_file_location("sglang_flags", FLAGS)
    flags = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(flags)
    flags.torchvision_without_kernels()  # sglang imports torchvision at module level (see sglang_flags.py)
    from sglang.srt.entrypoints.openai.protocol import Tool
    from sglang.srt.function_call.function_call_parser import FunctionCallParser
    from sglang.srt.parser.reasoning_parser import ReasoningParser

    return Tool, FunctionCallParser, ReasoningParser


def captures() -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(FIX.glob("*.json"))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--model-path", required=True)
    ap.add_argument("--script", default="Hello there.")
    ap.add_argument("--extra-prompt-token", action="store_true", help="render one token more than the chat endpoint")
    a = ap.parse_args()
    Tool, FunctionCallParser, ReasoningParser = load_sglang_parsers()
    caps = captures()
    seen: list[dict] = []

    def capture(path: str, match) -> dict | None:
        for c in caps:
            if c["path"] == path and c.get("http_status") == 200 and match(c["request"]):
                return c["response"]
        return None

    def render_key(body: dict) -> tuple:
        return (
            json.dumps(body.get("messages")),
            json.dumps(body.get("chat_template_kwargs")),
            json.dumps(body.get("tools")),
        )

    async def logged(request: web.Request) -> dict:
        body = await request.json() if request.can_read_body else {}
        seen.append({"path": request.path, "body": body})
        return body

    async def server_info(request):
        await logged(request)
        info = dict(capture("/server_info", lambda r: True))
        info["model_path"] = a.model_path
        return web.json_response(info)

    async def tokenize(request):
        body = await logged(request)
        answer = capture("/v1/tokenize", lambda r: render_key(r) == render_key(body))
        if answer is None:
            return web.json_response({"object": "error", "message": "stand-in: no capture renders this"}, status=500)
        answer = dict(answer)
        if a.extra_prompt_token:
            answer["tokens"] = answer["tokens"] + [198]
            answer["count"] += 1
        return web.json_response(answer)

    async def chat(request):
        body = await logged(request)
        answer = capture(
            "/v1/chat/completions",
            lambda r: (
                r["messages"] == body.get("messages")
                and r.get("max_tokens") == body.get("max_tokens")
                and r.get("temperature") == body.get("temperature")
                and r.get("chat_template_kwargs") == body.get("chat_template_kwargs")
            ),
        )
        if answer is None:
            return web.json_response({"object": "error", "message": "stand-in: no capture answers this"}, status=500)
        return web.json_response(answer)

    async def generate(request):
        body = await logged(request)
        answer = capture("/generate", lambda r: r["input_ids"] == body.get("input_ids"))
        if answer is not None:
            return web.json_response(answer)
        n = len(a.script)
        return web.json_response(
            {
                "text": a.script,
                "output_ids": [1000 + ord(ch) for ch in a.script],
                "meta_info": {
                    "finish_reason": {"type": "stop", "matched": 2},
                    "prompt_tokens": len(body.get("input_ids") or []),
                    "completion_tokens": n,
                },
            }
        )

    async def separate_reasoning(request):
        body = await logged(request)
        parser = ReasoningParser(model_type=body["reasoning_parser"])
        reasoning, text = parser.parse_non_stream(body["text"])
        return web.json_response({"reasoning_text": reasoning, "text": text})

    async def parse_function_call(request):
        body = await logged(request)
        parser = FunctionCallParser(
            tools=[Tool(**t) for t in body.get("tools") or []], tool_call_parser=body.get("tool_call_parser")
        )
        normal, calls = parser.parse_non_stream(body["text"])
        return web.json_response({"normal_text": normal, "calls": [c.model_dump() for c in calls]})

    async def log(_request):
        return web.json_response(seen)

    app = web.Application()
    app.router.add_get("/server_info", server_info)
    app.router.add_post("/v1/tokenize", tokenize)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/generate", generate)
    app.router.add_post("/separate_reasoning", separate_reasoning)
    app.router.add_post("/parse_function_call", parse_function_call)
    app.router.add_get("/standin/log", log)
    print("stand-in ready", flush=True)
    web.run_app(app, host="127.0.0.1", port=a.port, print=None)


if __name__ == "__main__":
    sys.exit(main())
