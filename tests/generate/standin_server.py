"""A STAND-IN for an OpenAI-compatible inference server (not an engine): scripted faults and speed.

It answers /health, /v1/models, /metrics and /v1/chat/completions with a fixed text, and can
be told to fail the first N chat requests with HTTP 500, to hang the next M for a while, to stop
answering after K (`hang_after`: every later request waits, unanswered, until `release()`: a
replica that hangs mid-job, as SIGSTOP makes one; or never to answer one request in N, `never_answer_every`),
to take `delay_per_token_s` per generated
token (to play a slow replica), or to stall `first_use_stall_s` on the first request of each
sampling path, every request waiting behind it (to play SGLang's first-use kernel JIT; `arrivals`
says which path each request had and whether that path was compiled when it came). It keeps every request
body it got (`bodies`) and echoes it back under `standin_request`, and a `respond` script may
answer with its own message (tool calls, reasoning_content included, and the token ids it
stands for) to play a target that diverges from a record or that thinks. With `token_ids` it
returns made-up token ids in vLLM's spelling (`mismatch_when` a body matches: one id more than its usage counts), and
`refuse_ids` answers 400 with that message to a request asking for ids (as SGLang 0.5.17 does with streaming).
`hold_first` keeps the first N requests unanswered until `release()` (a job held open, without timing). Used by
tests of the client's retries and by bench/generate_bench.py for unequal replicas. Run it alone with
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
        first_use_stall_s: float | None = None,
        token_ids: bool = False,
        mismatch_when: Callable[[dict[str, Any]], bool] | None = None,
        refuse_ids: str | None = None,
        hold_first: int = 0,
        hang_after: int | None = None,
        never_answer_every: int = 0,
    ) -> None:
        self.never_answer_every = never_answer_every
        self.hold_first = hold_first
        self._held: asyncio.Event | None = None  # hold_first's requests wait on it
        self.token_ids = token_ids
        self.mismatch_when = mismatch_when
        self.refuse_ids = refuse_ids
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
        self.first_use_stall_s = first_use_stall_s
        self.compiled: set[str] = set()  # sampling paths already "compiled" (first_use_stall_s)
        self.arrivals: list[tuple[str, bool, dict[str, Any]]] = []  # (path, compiled on arrival, body)
        self._compiling = asyncio.Lock()
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
        if n <= self.hold_first:
            assert self._held is not None
            await self._held.wait()
        if self.refuse_ids and body.get("return_token_ids"):
            return web.json_response({"object": "error", "message": self.refuse_ids, "code": 400}, status=400)
        if n <= self.fail_first + self.hang_next:
            self.hung += 1
            await asyncio.sleep(self.hang_s)
        if self.never_answer_every and n % self.never_answer_every == 0 and not self._released:
            self.hung += 1  # one request in N never answered (until release): a wedged request, not a dead server
            if self._released_event is None:
                self._released_event = asyncio.Event()
            await self._released_event.wait()
        if self.hang_after is not None and n > self.hang_after and not self._released:
            self.hung += 1
            if self._released_event is None:
                self._released_event = asyncio.Event()
            await self._released_event.wait()
        if self.first_use_stall_s is not None:
            await self._first_use(body)
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
        scripted = dict(self.respond(body) or {}) if self.respond else {}
        # A script may give token ids too (vLLM's shape: prompt ids at the root, sampled ids in the choice).
        ids = {k: scripted.pop(k) for k in ("prompt_token_ids", "token_ids") if k in scripted}
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": tokens}
        if "token_ids" in ids:
            usage = {
                "prompt_tokens": len(ids.get("prompt_token_ids") or []),
                "completion_tokens": len(ids["token_ids"]),
            }
        if scripted:
            message = {"role": "assistant", "content": None, **scripted}
            finish = "tool_calls" if message.get("tool_calls") else "stop"
        if not ids and self.token_ids and body.get("return_token_ids"):
            extra = 1 if self.mismatch_when is not None and self.mismatch_when(body) else 0
            ids = {
                "prompt_token_ids": [7] * max(1, prompt_tokens),
                "token_ids": [100 + k for k in range(tokens + extra)],
            }
            usage = {"prompt_tokens": prompt_tokens, "completion_tokens": tokens}
        choice = {"index": 0, "message": message, "finish_reason": finish}
        if "token_ids" in ids:
            choice["token_ids"] = ids["token_ids"]
        payload = {
            "id": f"standin-{n}",
            "object": "chat.completion",
            "model": self.model,
            "choices": [choice],
            "usage": usage,
            "standin_request": body,
        }
        if "prompt_token_ids" in ids:
            payload["prompt_token_ids"] = ids["prompt_token_ids"]
        return web.json_response(payload)

    async def _first_use(self, body: dict[str, Any]) -> None:
        """Stall the whole server while a path compiles, as one engine process does."""
        path = standin_path(body)
        self.arrivals.append((path, path in self.compiled, body))
        async with self._compiling:
            if path not in self.compiled:
                await asyncio.sleep(self.first_use_stall_s or 0.0)
                self.compiled.add(path)

    def release(self) -> None:
        """Answer the requests held by `hold_first` or `hang_after`, and every later one at once (from any thread)."""
        self._released = True
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(lambda: self._released_event and self._released_event.set())
            if self._held is not None:
                self._loop.call_soon_threadsafe(self._held.set)

    # --- running in a background thread (tests) -----------------------------------------

    def start(self, port: int = 0) -> str:
        """Serve on 127.0.0.1 in a daemon thread; returns the base URL."""
        ready = threading.Event()

        def serve() -> None:
            self._loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self._loop)
            self._held = asyncio.Event()
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


def standin_path(body: dict[str, Any]) -> str:
    """The stand-in's own idea of a sampling path (what would pick another kernel in SGLang 0.5.12)."""
    if body.get("temperature", 1.0) == 0 or body.get("top_k") == 1:
        flags = ["greedy"]
    else:
        flags = [
            name
            for name, on in (
                ("top_p", body.get("top_p", 1.0) < 1),
                ("top_k", (body.get("top_k") or 0) > 1),
                ("min_p", bool(body.get("min_p"))),
            )
            if on
        ] or ["plain"]
    if body.get("logprobs"):
        flags.append("logprobs")
    return ",".join(flags)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--model", default="standin")
    ap.add_argument("--delay-per-token", type=float, default=0.0)
    ap.add_argument("--max-concurrent", type=int, default=64)
    ap.add_argument("--fail-first", type=int, default=0)
    args = ap.parse_args()
    server = StandinServer(
        model=args.model,
        delay_per_token_s=args.delay_per_token,
        max_concurrent=args.max_concurrent,
        fail_first=args.fail_first,
    )
    web.run_app(server.app(), host="127.0.0.1", port=args.port, print=None)


if __name__ == "__main__":
    main()
