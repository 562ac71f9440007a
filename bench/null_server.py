"""A NULL SERVER (not an engine, not the test stand-in): answers every chat completion at once.

A minimal HTTP/1.1 keep-alive server on raw asyncio protocols, so that on one core it answers far
faster than any client can ask: one prebuilt, valid chat completion for every POST, `/v1/models`
and `/health` for GETs. With `--answer-tokens N` the answer is N words long, and a request that
asks for token ids (`return_token_ids`) gets them as vLLM returns them (`--prompt-tokens` ids at the
response root, N in the choice). It listens on several ports in one process (one per simulated replica)
and records each chat request's arrival time (CLOCK_MONOTONIC, shared by every process of the
machine); `GET /_arrivals` returns and clears them. With `--tool-call`, a request that carries tools
and ends on a user turn is answered with one call, get_weather({"city": "Paris"}) (so a recorded
call of it is matched and its result kept). Used by bench/client_overhead.py and bench/rows_identical.py.

    .venv/bin/python bench/null_server.py --ports 18200 18201 [--answer-tokens 600 --prompt-tokens 300]
"""

from __future__ import annotations

import argparse
import asyncio
import time

import orjson

MODEL = "null"
_COMPLETION = orjson.dumps(
    {
        "id": "null-0",
        "object": "chat.completion",
        "model": MODEL,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Blue."}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 2},
    }
)
_MODELS = orjson.dumps({"object": "list", "data": [{"id": MODEL, "object": "model", "max_model_len": 4096}]})


def _response(body: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


CHAT, MODELS, HEALTH = _response(_COMPLETION), _response(_MODELS), _response(b"ok")
CHAT_IDS = CHAT
TOOL_CALL: bytes | None = None  # with --tool-call: the answer to a tools request that ends on a user turn


def build_tool_call() -> None:
    global TOOL_CALL
    call = {
        "id": "null-call-0",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }
    TOOL_CALL = _response(
        orjson.dumps(
            {
                "id": "null-0",
                "object": "chat.completion",
                "model": MODEL,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": None, "tool_calls": [call]},
                        "finish_reason": "tool_calls",
                    }
                ],
                "usage": {"prompt_tokens": 12, "completion_tokens": 9},
            }
        )
    )


def _chat_answer(request_body: bytes) -> bytes:
    if TOOL_CALL is not None and b'"tools"' in request_body:
        body = orjson.loads(request_body)
        if body.get("tools") and body["messages"][-1]["role"] == "user":
            return TOOL_CALL
    return CHAT_IDS if b'"return_token_ids":true' in request_body else CHAT


def build_answers(answer_tokens: int, prompt_tokens: int) -> None:
    """An answer of `answer_tokens` words; with ids (vLLM's shape) for requests that ask for them."""
    global CHAT, CHAT_IDS
    if not answer_tokens:
        return
    words = [f" word{i % 50}" for i in range(answer_tokens - 1)]
    body = {
        "id": "null-0",
        "object": "chat.completion",
        "model": MODEL,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "".join(words).strip()}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": answer_tokens},
    }
    CHAT = _response(orjson.dumps(body))
    # Ids spread like a BPE vocabulary's: mostly below 16K, some up to 150K.
    ids = [(i * 7919) % (16000 if i % 5 else 150000) for i in range(answer_tokens + prompt_tokens)]
    body["choices"][0]["token_ids"] = ids[:answer_tokens]
    body["prompt_token_ids"] = ids[answer_tokens:]
    CHAT_IDS = _response(orjson.dumps(body))


ARRIVALS: list[float] = []


class _Http(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.t = transport
        self.buf = b""

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end]
            length = 0
            for line in head.split(b"\r\n")[1:]:
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            if len(self.buf) < end + 4 + length:
                return
            request_body = self.buf[end + 4 : end + 4 + length]
            self.buf = self.buf[end + 4 + length :]
            if head.startswith(b"POST"):
                ARRIVALS.append(time.monotonic())
                self.t.write(_chat_answer(request_body))
            elif head.startswith(b"GET /v1/models"):
                self.t.write(MODELS)
            elif head.startswith(b"GET /_arrivals"):
                body = orjson.dumps(ARRIVALS)
                ARRIVALS.clear()
                self.t.write(_response(body))
            else:
                self.t.write(HEALTH)


async def serve(ports: list[int]) -> None:
    loop = asyncio.get_running_loop()
    for p in ports:
        await loop.create_server(_Http, "127.0.0.1", p, backlog=4096)
    await asyncio.Event().wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ports", type=int, nargs="+", required=True)
    ap.add_argument("--answer-tokens", type=int, default=0, help="answer length in words (0: the two-token 'Blue.')")
    ap.add_argument("--prompt-tokens", type=int, default=12, help="prompt ids returned with --answer-tokens")
    ap.add_argument("--tool-call", action="store_true", help="answer tools requests ending on a user turn with a call")
    a = ap.parse_args()
    build_answers(a.answer_tokens, a.prompt_tokens)
    if a.tool_call:
        build_tool_call()
    asyncio.run(serve(a.ports))


if __name__ == "__main__":
    main()
