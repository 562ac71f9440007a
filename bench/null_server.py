"""A NULL SERVER (not an engine, not the test stand-in): answers every chat completion at once.

A minimal HTTP/1.1 keep-alive server on raw asyncio protocols, so that on one core it answers far
faster than any client can ask: one prebuilt, valid chat completion for every POST, `/v1/models`
and `/health` for GETs. It listens on several ports in one process (one per simulated replica)
and records each chat request's arrival time (CLOCK_MONOTONIC, shared by every process of the
machine); `GET /_arrivals` returns and clears them. Used by bench/client_overhead.py.

    .venv/bin/python bench/null_server.py --ports 18200 18201
"""

from __future__ import annotations

import argparse
import asyncio
import time

import orjson

MODEL = "null"
_COMPLETION = orjson.dumps({
    "id": "null-0", "object": "chat.completion", "model": MODEL,
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Blue."}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 12, "completion_tokens": 2},
})
_MODELS = orjson.dumps({"object": "list", "data": [{"id": MODEL, "object": "model", "max_model_len": 4096}]})


def _response(body: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


CHAT, MODELS, HEALTH = _response(_COMPLETION), _response(_MODELS), _response(b"ok")
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
            self.buf = self.buf[end + 4 + length:]
            if head.startswith(b"POST"):
                ARRIVALS.append(time.monotonic())
                self.t.write(CHAT)
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
    asyncio.run(serve(ap.parse_args().ports))


if __name__ == "__main__":
    main()
