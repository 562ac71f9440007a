"""One chat-completion attempt against one server, with errors translated at the boundary.

Which attempts are retried, where, and after how long is the dispatcher's job; this module
only says whether a failure is worth retrying (TransientError) or is the row's fault (Rejected).
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass, replace
from typing import Any

import aiohttp
import orjson

from fleetgen.errors import FleetgenError
from fleetgen.fleet.probe import auth_headers
from fleetgen.generate.dispatch.answer_ids import REQUEST_FIELDS, read_ids, refuses_ids, without_id_fields
from fleetgen.rows.token_ids import REFUSED, TurnIds


class TransientError(FleetgenError):
    """A failure another attempt may not hit: connection loss, timeout, 408, 429, 5xx."""

    def __init__(self, message: str, *, status: int | None = None, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after

    @property
    def counts_against_replica(self) -> bool:
        """A 429 says the server is busy, not broken."""
        return self.status != 429


class Rejected(FleetgenError):
    """The server refused this request (4xx): the row is at fault, not the replica."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


class IdsRefused(Rejected):
    """The server refused the token id fields (a 4xx whose message names them): the request's fault, not the row's."""


@dataclass(frozen=True)
class ChatAnswer:
    """What one completion returned, reduced to what a result record needs."""

    content: str | None
    reasoning: str | None
    tool_calls: list[dict[str, Any]] | None
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int
    model: str | None
    token_ids: TurnIds | None = None  # what the server was fed and sampled, if it said
    ids_missing: str | None = None  # where token_ids is None: why (a token_ids.MISSING code)


def backoff_delay(attempt: int, base_s: float, cap_s: float, rng: random.Random) -> float:
    """Full jitter: uniform in [0, min(cap, base * 2**attempt)], so retries of many rows spread out."""
    return rng.uniform(0, min(cap_s, base_s * (2**attempt)))


def new_session(api_key: str | None, connections: int) -> aiohttp.ClientSession:
    """One keep-alive session for the whole run, sized to the requests kept in flight."""
    connector = aiohttp.TCPConnector(limit=connections, limit_per_host=0, keepalive_timeout=60)
    return aiohttp.ClientSession(
        connector=connector, headers=auth_headers(api_key), json_serialize=lambda o: orjson.dumps(o).decode()
    )


@functools.lru_cache(maxsize=64)
def _timeout(total_s: float) -> aiohttp.ClientTimeout:
    """One ClientTimeout per distinct limit (a run has a few), not one per request; it is immutable."""
    return aiohttp.ClientTimeout(total=total_s, sock_connect=min(10.0, total_s))


_JSON = {"Content-Type": "application/json"}  # aiohttp only reads it


async def post_json(
    session: aiohttp.ClientSession, url: str, body: dict[str, Any], timeout_s: float, expect: str = "JSON"
) -> Any:
    """POST one JSON body; the decoded answer, or TransientError / Rejected as for a chat completion."""
    retry_after = None
    try:
        async with session.post(url, data=orjson.dumps(body), headers=_JSON, timeout=_timeout(timeout_s)) as r:
            raw = await r.read()
            status = r.status
            if status != 200:
                retry_after = _retry_after(r.headers.get("Retry-After"))
    except TimeoutError:
        raise TransientError(f"timed out after {timeout_s:.0f}s") from None
    except (aiohttp.ClientError, OSError) as e:
        raise TransientError(f"connection error: {type(e).__name__}: {e}") from None
    if status != 200:
        message = server_message(raw)
        if status in (408, 429) or status >= 500:
            raise TransientError(f"HTTP {status}: {message}", status=status, retry_after=retry_after)
        raise Rejected(f"HTTP {status}: {message}", status=status)
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise TransientError(f"answer is not {expect}: {raw[:200]!r}") from None


async def chat(session: aiohttp.ClientSession, endpoint: str, body: dict[str, Any], timeout_s: float) -> ChatAnswer:
    """POST /v1/chat/completions once; raise TransientError or Rejected for anything but a usable answer."""
    payload = await post_json(session, endpoint + "/v1/chat/completions", body, timeout_s, "a chat completion")
    try:
        choice = payload["choices"][0]
        message = choice["message"]
        usage = payload.get("usage") or {}
        ids = read_ids(payload, choice)
        return ChatAnswer(
            content=message.get("content"),
            # vLLM names it `reasoning` in newer versions, `reasoning_content` in older ones and SGLang.
            reasoning=message.get("reasoning_content") or message.get("reasoning"),
            tool_calls=message.get("tool_calls") or None,
            finish_reason=choice.get("finish_reason"),
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
            model=payload.get("model"),
            token_ids=ids if isinstance(ids, TurnIds) else None,
            ids_missing=None if isinstance(ids, TurnIds) else ids,
        )
    except (KeyError, IndexError, TypeError, ValueError, AttributeError):
        raise TransientError(f"answer is not a chat completion: {str(payload)[:200]!r}") from None


async def chat_or_without_ids(
    session: aiohttp.ClientSession,
    endpoint: str,
    body: dict[str, Any],
    timeout_s: float,
    refused: set[str],
    notes: list[str],
    *,
    downgrade: bool,
) -> ChatAnswer:
    """`chat`, asking an endpoint that refused the token id fields without them (once per endpoint, said in `notes`).

    Its answers then carry `ids_missing=REFUSED`. Without `downgrade` (--require-token-ids) the refusal
    raises IdsRefused instead.
    """
    asks = any(k in body for k in REQUEST_FIELDS)
    if asks and endpoint in refused:
        return replace(await chat(session, endpoint, without_id_fields(body), timeout_s), ids_missing=REFUSED)
    try:
        return await chat(session, endpoint, body, timeout_s)
    except Rejected as e:
        if not asks or not refuses_ids(e.message):
            raise
        if not downgrade:
            raise IdsRefused(e.message, status=e.status) from None
        if endpoint not in refused:  # requests in flight meet the same refusal: one note per endpoint
            refused.add(endpoint)
            notes.append(
                f"{endpoint} refused the token id fields ({e.message}); asking it without them "
                "(as --no-token-ids): its turns are recorded without ids, reason refused"
            )
    return replace(await chat(session, endpoint, without_id_fields(body), timeout_s), ids_missing=REFUSED)


def server_message(raw: bytes) -> str:
    """The server's own error message (OpenAI `error.message`, FastAPI `detail`), else the body's head."""
    try:
        payload = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw[:300].decode("utf-8", "replace").strip() or "(empty body)"
    if isinstance(payload, dict):
        err = payload.get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:500]
        for key in ("message", "detail", "error"):
            if payload.get(key):
                return str(payload[key])[:500]
    return str(payload)[:300]


def _retry_after(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None


async def served_models(session: aiohttp.ClientSession, endpoint: str) -> tuple[list[str], int | None]:
    """(model ids an endpoint serves, its max_model_len if it says); ([], None) when unreachable."""
    try:
        async with session.get(endpoint + "/v1/models", timeout=aiohttp.ClientTimeout(total=10)) as r:
            if r.status != 200:
                return [], None
            payload = orjson.loads(await r.read())
    except (aiohttp.ClientError, OSError, TimeoutError, orjson.JSONDecodeError):
        return [], None
    data = payload.get("data") or [] if isinstance(payload, dict) else []
    ids = [m.get("id") for m in data if isinstance(m, dict)]
    lens = [m.get("max_model_len") for m in data if isinstance(m, dict) and isinstance(m.get("max_model_len"), int)]
    return [i for i in ids if i], (lens[0] if lens else None)
