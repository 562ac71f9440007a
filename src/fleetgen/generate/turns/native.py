"""SGLang's native path: a chat turn through /generate, for servers whose chat endpoint returns no token ids.

SGLang before 0.5.17 ignores `return_token_ids` on /v1/chat/completions; only its native /generate
returns the sampled ids (`output_ids`), and it takes `input_ids`. One turn here is what the chat
endpoint does inside the server, done in three steps the server itself answers, so nothing is
re-implemented that could drift from the target's own behaviour:

1. POST /v1/tokenize with the turn's messages, tools and template switches: SGLang renders them with
   the code its chat endpoint uses (`_process_messages`), so the prompt ids are the chat endpoint's.
2. POST /generate with those ids and the chat request's sampling parameters, plus the defaults the
   chat endpoint takes from the model's generation_config.json (`--sampling-defaults model`).
3. POST /separate_reasoning and /parse_function_call with the parsers the server was started with.

Every request here lands on the server's one HTTP and tokenizer process, which bounds a small model's
request rate, so two of them are skipped where the answer is known without asking (BENCHMARKS.md,
"full speed"): the samples of a prompt share their first turn's rendering (one /v1/tokenize, its ids
reused), and a text the reasoning parser cannot split (THINK_FREE) is not sent to it.

Where the chat endpoint forces reasoning (its template or switches open a `<think>` block that the
sampled text then lacks), the text handed to /separate_reasoning starts with the parser's opening
tag; which switches force it is measured against the chat endpoint at start (`paths.py`).
"""

from __future__ import annotations

import asyncio
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from fleetgen.generate.dispatch.client import ChatAnswer, TransientError, post_json
from fleetgen.rows.token_ids import COUNT_MISMATCH, TurnIds

# The opening tag each SGLang reasoning parser looks for; "<think>" for the rest.
REASONING_OPEN = {"kimi": "\u25c1think\u25b7", "gpt-oss": "<|channel|>analysis<|message|>"}

# Reasoning parsers whose split of a text without their opening tag, when not forced, is "no reasoning, the text
# as is": SGLang's Qwen3Detector (force_reasoning False by default) and the base detector's detect_and_parse.
# tests/generate/test_native_shortcuts.py checks this against SGLang's own parser.
THINK_FREE = frozenset({"qwen3", "interns1"})
# Renderings kept for reuse (a prompt's samples come close together: the LRU need not be long).
RENDER_CACHE_SIZE = 4096

# Chat body field -> /generate sampling_params field; anything else a job sends is refused at start.
SAMPLING_FIELDS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "max_tokens": "max_new_tokens",
    "max_completion_tokens": "max_new_tokens",
    "min_tokens": "min_new_tokens",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "repetition_penalty": "repetition_penalty",
    "stop": "stop",
    "stop_token_ids": "stop_token_ids",
    "seed": "sampling_seed",
    "ignore_eos": "ignore_eos",
    "skip_special_tokens": "skip_special_tokens",
    "no_stop_trim": "no_stop_trim",
    "logit_bias": "logit_bias",
}
# Fields that shape the rendered prompt: they go to /v1/tokenize.
TEMPLATE_FIELDS = ("messages", "tools", "tool_choice", "chat_template_kwargs", "reasoning_effort")
# Fields the native path has no use for (the chat path's own switches).
IGNORED_FIELDS = frozenset(
    {"model", "return_token_ids", "return_prompt_token_ids", "stream", "n", "separate_reasoning"}
)
# The model defaults SGLang's chat endpoint applies where a request leaves them out.
MODEL_DEFAULTS = ("repetition_penalty", "temperature", "top_k", "top_p", "min_p")


def unsupported_fields(body: dict[str, Any]) -> list[str]:
    """Body fields the native path cannot send as the chat endpoint would."""
    known = set(SAMPLING_FIELDS) | set(TEMPLATE_FIELDS) | IGNORED_FIELDS
    return sorted(k for k in body if k not in known)


@dataclass
class NativeServer:
    """What a native turn needs to know about one SGLang server, read from the server at start."""

    reasoning_parser: str | None
    tool_call_parser: str | None
    model_defaults: dict[str, Any] = field(default_factory=dict)
    # Whether the chat endpoint treats a turn's output as reasoning until the closing tag, per template switches.
    forced: dict[str, bool] = field(default_factory=dict)

    renders: RenderCache = field(default_factory=lambda: RenderCache(RENDER_CACHE_SIZE))

    @property
    def reasoning_open(self) -> str:
        return REASONING_OPEN.get(self.reasoning_parser or "", "<think>")


class RenderCache:
    """Prompt ids by (endpoint, /v1/tokenize body): one request per distinct rendering, concurrent askers share it.

    A rendering is a pure function of the body and the server's template, so reusing it sends /generate
    exactly the ids a fresh /v1/tokenize would have given. Failures are not kept: the next asker retries.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._done: OrderedDict[tuple[str, bytes], list[int]] = OrderedDict()
        self._pending: dict[tuple[str, bytes], asyncio.Future[list[int]]] = {}
        self.hits = 0
        self.misses = 0

    async def get(self, endpoint: str, body: dict[str, Any], fetch: Callable[[], Awaitable[list[int]]]) -> list[int]:
        key = (endpoint, orjson.dumps(body, option=orjson.OPT_SORT_KEYS))
        while True:
            ids = self._done.get(key)
            if ids is not None:
                self._done.move_to_end(key)
                self.hits += 1
                return ids
            pending = self._pending.get(key)
            if pending is None:
                break
            try:
                ids = await asyncio.shield(pending)
            except asyncio.CancelledError:
                if not pending.cancelled():
                    raise  # this asker is cancelled, not the request it waited on
                continue  # the asker that sent it was cancelled: ask again
            except Exception:  # noqa: BLE001  (the sender's failure is the sender's; this asker tries itself)
                continue
            self.hits += 1
            return ids
        self.misses += 1
        future: asyncio.Future[list[int]] = asyncio.get_running_loop().create_future()
        self._pending[key] = future
        try:
            ids = await fetch()
        except BaseException as e:
            if isinstance(e, Exception):
                future.set_exception(e)
                future.exception()  # marked retrieved: with no sharer it must not warn
            else:
                future.cancel()
            raise
        finally:
            self._pending.pop(key, None)
        future.set_result(ids)
        self._done[key] = ids
        if len(self._done) > self.size:
            self._done.popitem(last=False)
        return ids


def switches_key(body: dict[str, Any]) -> str:
    """The template switches that decide whether a turn opens inside a reasoning block."""
    return orjson.dumps(
        {"k": body.get("chat_template_kwargs"), "e": body.get("reasoning_effort")}, option=orjson.OPT_SORT_KEYS
    ).decode()


def tokenize_body(body: dict[str, Any]) -> dict[str, Any]:
    """The /v1/tokenize request that renders a chat body's prompt as the chat endpoint would."""
    out = {k: body[k] for k in TEMPLATE_FIELDS if body.get(k) is not None}
    out["model"] = body.get("model")
    return out


def sampling_params(body: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """/generate's sampling_params for a chat body, with the chat endpoint's defaults where it is silent."""
    params: dict[str, Any] = {k: v for k, v in defaults.items() if body.get(k) is None}
    for key, name in SAMPLING_FIELDS.items():
        if body.get(key) is not None:
            params[name] = body[key]
    if body.get("tools") and body.get("tool_choice") != "none":
        params["skip_special_tokens"] = False  # the chat endpoint keeps tool-call markup for its parser
    kwargs = body.get("chat_template_kwargs") or {}
    if "spaces_between_special_tokens" in kwargs:
        params["spaces_between_special_tokens"] = kwargs["spaces_between_special_tokens"]
    return params


async def render(
    http: aiohttp.ClientSession, endpoint: str, body: dict[str, Any], timeout_s: float, cache: RenderCache | None = None
) -> list[int]:
    """The prompt ids of a chat body, rendered by the server's own chat code (once per distinct body with a cache)."""
    request = tokenize_body(body)
    if cache is None:
        return await _render(http, endpoint, request, timeout_s)
    return await cache.get(endpoint, request, lambda: _render(http, endpoint, request, timeout_s))


async def _render(http: aiohttp.ClientSession, endpoint: str, request: dict[str, Any], timeout_s: float) -> list[int]:
    answer = await post_json(http, endpoint + "/v1/tokenize", request, timeout_s)
    tokens = answer.get("tokens") if isinstance(answer, dict) else None
    if not isinstance(tokens, list) or not tokens or not all(isinstance(t, int) for t in tokens):
        raise TransientError(f"/v1/tokenize answered without token ids: {str(answer)[:200]}")
    return tokens


async def sample(
    http: aiohttp.ClientSession, endpoint: str, prompt_ids: list[int], params: dict[str, Any], timeout_s: float
) -> tuple[str, list[int], dict[str, Any]]:
    """(text, sampled ids, meta_info) of one /generate call."""
    answer = await post_json(
        http, endpoint + "/generate", {"input_ids": prompt_ids, "sampling_params": params}, timeout_s
    )
    if isinstance(answer, list) and len(answer) == 1:
        answer = answer[0]
    if not isinstance(answer, dict) or not isinstance(answer.get("output_ids"), list):
        raise TransientError(f"/generate answered without output_ids: {str(answer)[:200]}")
    return str(answer.get("text") or ""), answer["output_ids"], answer.get("meta_info") or {}


async def split_reasoning(
    http: aiohttp.ClientSession, endpoint: str, server: NativeServer, text: str, forced: bool, timeout_s: float
) -> tuple[str | None, str]:
    """(reasoning, rest) as the server's reasoning parser splits the text."""
    if not server.reasoning_parser:
        return None, text
    opener = server.reasoning_open
    if not forced and server.reasoning_parser in THINK_FREE and opener not in text:
        return None, text  # what the parser answers for it (THINK_FREE), without the round trip
    sent = opener + text if forced and not text.lstrip().startswith(opener) else text
    answer = await post_json(
        http, endpoint + "/separate_reasoning", {"text": sent, "reasoning_parser": server.reasoning_parser}, timeout_s
    )
    if not isinstance(answer, dict):
        raise TransientError(f"/separate_reasoning answered {str(answer)[:200]}")
    return answer.get("reasoning_text") or None, answer.get("text") or ""


async def parse_calls(
    http: aiohttp.ClientSession,
    endpoint: str,
    server: NativeServer,
    text: str,
    tools: list[dict[str, Any]],
    timeout_s: float,
) -> tuple[str, list[dict[str, Any]] | None]:
    """(content, tool calls in OpenAI shape) as the server's tool-call parser reads the text."""
    answer = await post_json(
        http,
        endpoint + "/parse_function_call",
        {"text": text, "tools": tools, "tool_call_parser": server.tool_call_parser},
        timeout_s,
    )
    calls = answer.get("calls") if isinstance(answer, dict) else None
    if not calls:
        return text, None  # the chat endpoint keeps the text whole when it finds no call
    return str(answer.get("normal_text") or ""), [
        {
            "id": f"call_{uuid.uuid4().hex[:24]}",
            "index": c.get("tool_index"),
            "type": "function",
            "function": {"name": c.get("name"), "arguments": c.get("parameters")},
        }
        for c in calls
    ]


async def native_chat(
    http: aiohttp.ClientSession,
    endpoint: str,
    body: dict[str, Any],
    timeout_s: float,
    server: NativeServer,
    forced: bool | None = None,
) -> ChatAnswer:
    """One chat turn through /v1/tokenize, /generate and the server's parsers; the same answer shape as `chat`."""
    prompt_ids = await render(http, endpoint, body, timeout_s, server.renders)
    text, output_ids, meta = await sample(
        http, endpoint, prompt_ids, sampling_params(body, server.model_defaults), timeout_s
    )
    if forced is None:
        forced = server.forced.get(switches_key(body), False)
    reasoning, text = await split_reasoning(http, endpoint, server, text, forced, timeout_s)
    finish = meta.get("finish_reason")
    finish_reason = finish.get("type") if isinstance(finish, dict) else finish
    calls = None
    tools = body.get("tools")
    if tools and body.get("tool_choice") != "none" and server.tool_call_parser:
        text, calls = await parse_calls(http, endpoint, server, text, tools, timeout_s)
        if calls and finish_reason == "stop":
            finish_reason = "tool_calls"
    completion_tokens = int(meta.get("completion_tokens") or len(output_ids))
    ids = TurnIds(prompt_ids, output_ids) if completion_tokens == len(output_ids) else None
    return ChatAnswer(
        content=text or None,
        reasoning=reasoning,
        tool_calls=calls,
        finish_reason=finish_reason,
        prompt_tokens=int(meta.get("prompt_tokens") or len(prompt_ids)),
        completion_tokens=completion_tokens,
        model=body.get("model"),
        token_ids=ids,
        ids_missing=None if ids is not None else COUNT_MISMATCH,  # the same reason as on the chat path
    )
