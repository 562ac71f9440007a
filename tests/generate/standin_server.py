"""A STAND-IN for an OpenAI-compatible inference server (not an engine): scripted faults and speed.

It answers /health, /v1/models, /metrics and /v1/chat/completions with a fixed text, and can
be told to fail the first N chat requests with HTTP 500, to hang the next M for a while, to stop
answering after K (`hang_after`: every later request waits, unanswered, until `release()`: a
replica that hangs mid-job, as SIGSTOP makes one), or to take `delay_per_token_s` per generated
token (to play a slow replica). It keeps every request
body it got (`bodies`) and echoes it back under `standin_request`, and a `respond` script may
answer with its own message (tool calls included) to play a target that diverges from a record. Used by tests of the
client's retries and by bench/generate_bench.py for unequal replicas. Run it alone with
`python tests/generate/standin_server.py --port 18100 --delay-per-token 0.01`.
"""

from __future__ import annotations

import argparse
import asyncio
import threading
from collections.abc import Callable
from typing import Any

from aiohttp import web

WORDS = "the stand-in server answers with this fixed sentence again and again".split()


class StandinServer:
    """Scripted behaviour: fail `fail_first` requests with 500, then hang `hang_next` for `hang_s` seconds."""

    def __init__(
        self,
        *,
        model: str = "standin",
        fail_first: int = 0,
        hang_next: int = 0,
        hang_s: float = 5.0,
        delay_per_token_s: float = 0.0,
        max_concurrent: int = 64,
        max_model_len: int = 2048,
        respond: Callable[[dict[str, Any]], dict[str, Any] | None] | None = None,
        hang_after: int | None = None,
    ) -> None:
        self.model = model
        self.fail_first = fail_first
        self.hang_next = hang_next
        self.hang_s = hang_s
        self.delay_per_token_s = delay_per_token_s
        self.max_model_len = max_model_len
        self.respond = respond
        self.hang_after = hang_after
        self._released = False
        self._released_event: asyncio.Event | None = None  # made on the server's loop, at the first hold
        self.bodies: list[dict[str, Any]] = []
        self.requests = 0
        self.completed = 0
        self.failed = 0
        self.hung = 0
        self.generated_tokens = 0
        self._running = 0
        self._slots = asyncio.Semaphore(max_concurrent)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self.port: int | None = None

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/health", self._health)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_post("/v1/chat/completions", self._chat)
        return app

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": self.model, "max_model_len": self.max_model_len}]})

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(
            text=f"vllm:num_requests_running {self._running}\nvllm:generation_tokens_total {self.generated_tokens}\n"
        )

    async def _chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.bodies.append(body)
        self.requests += 1
        n = self.requests
        if n <= self.fail_first:
            self.failed += 1
            return web.json_response({"error": {"message": "stand-in: scripted internal error"}}, status=500)
        if n <= self.fail_first + self.hang_next:
            self.hung += 1
            await asyncio.sleep(self.hang_s)
        if self.hang_after is not None and n > self.hang_after and not self._released:
            self.hung += 1
            if self._released_event is None:
                self._released_event = asyncio.Event()
            await self._released_event.wait()
        async with self._slots:  # a server runs a bounded batch; the rest wait, as in an engine
            self._running += 1
            try:
                max_tokens = int(body.get("max_tokens") or 16)
                tokens = min(max_tokens, len(WORDS))
                if self.delay_per_token_s:
                    await asyncio.sleep(self.delay_per_token_s * tokens)
            finally:
                self._running -= 1
        self.generated_tokens += tokens
        self.completed += 1
        finish = "length" if tokens == max_tokens else "stop"
        prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in body.get("messages", []))
        message = {"role": "assistant", "content": " ".join(WORDS[:tokens]) + f" #{n}"}
        scripted = self.respond(body) if self.respond else None
        if scripted is not None:
            message = {"role": "assistant", "content": None, **scripted}
            finish = "tool_calls" if message.get("tool_calls") else "stop"
        return web.json_response(
            {
                "id": f"standin-{n}",
                "object": "chat.completion",
                "model": self.model,
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "finish_reason": finish,
                    }
                ],
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": tokens},
                "standin_request": body,
            }
        )

    def release(self) -> None:
        """Answer the requests held by `hang_after`, and every later one at once (callable from any thread)."""
        self._released = True
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(lambda: self._released_event and self._released_event.set())

    # --- running in a background thread (tests) -----------------------------------------

    def start(self, port: int = 0) -> str:
        """Serve on 127.0.0.1 in a daemon thread; returns the base URL."""
        ready = threading.Event()

        def serve() -> None:
            self._loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self._loop)
            # Hung handlers (the hang faults) are cancelled after 1 s, not 60: stop() then really stops.
            self._runner = web.AppRunner(self.app(), shutdown_timeout=1.0)
            self._loop.run_until_complete(self._runner.setup())
            site = web.TCPSite(self._runner, "127.0.0.1", port)
            self._loop.run_until_complete(site.start())
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            ready.set()
            self._loop.run_forever()
            self._loop.run_until_complete(self._runner.cleanup())
            self._loop.close()

        self._thread = threading.Thread(target=serve, daemon=True, name="standin-server")
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("stand-in server did not start")
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.release()  # held requests end too, so the server stops at once
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--model", default="standin")
    ap.add_argument("--delay-per-token", type=float, default=0.0)
    ap.add_argument("--max-concurrent", type=int, default=64)
    ap.add_argument("--fail-first", type=int, default=0)
    args = ap.parse_args()
    server = StandinServer(
        model=args.model, delay_per_token_s=args.delay_per_token, max_concurrent=args.max_concurrent,
        fail_first=args.fail_first,
    )
    web.run_app(server.app(), host="127.0.0.1", port=args.port, print=None)


if __name__ == "__main__":
    main()
