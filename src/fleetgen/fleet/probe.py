"""HTTP checks against one server: health, a real generation, its reported config and metrics."""

from __future__ import annotations

import time
from dataclasses import dataclass

import aiohttp

from fleetgen.fleet.engines.base import Engine, Metrics

PROBE_PROMPT = "What is the capital of France? Answer in one sentence."


def auth_headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


async def health(
    session: aiohttp.ClientSession, base: str, engine: Engine, timeout: float = 5.0
) -> tuple[int | None, float]:
    """(HTTP status or None when unreachable, latency in seconds)."""
    t0 = time.perf_counter()
    try:
        async with session.get(base + engine.health_path, timeout=aiohttp.ClientTimeout(total=timeout)) as r:
            await r.read()
            return r.status, time.perf_counter() - t0
    except (aiohttp.ClientError, TimeoutError, OSError):
        return None, time.perf_counter() - t0


@dataclass
class ProbeResult:
    ok: bool
    detail: str
    text: str = ""
    latency_s: float = 0.0


async def generation_probe(
    session: aiohttp.ClientSession, base: str, model: str, timeout: float = 120.0
) -> ProbeResult:
    """A real chat completion: non-empty text, a finish_reason and completion tokens > 0."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": PROBE_PROMPT}],
        "max_tokens": 24,
        "temperature": 0,
    }
    t0 = time.perf_counter()
    try:
        async with session.post(
            base + "/v1/chat/completions", json=body, timeout=aiohttp.ClientTimeout(total=timeout)
        ) as r:
            payload = await r.json(content_type=None)
            if r.status != 200:
                return ProbeResult(False, f"HTTP {r.status}: {str(payload)[:300]}")
    except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as e:
        return ProbeResult(False, f"request failed: {type(e).__name__}: {e}")
    latency = time.perf_counter() - t0
    try:
        choice = payload["choices"][0]
        message = choice["message"]
        text = (message.get("content") or "") + (message.get("reasoning_content") or "")
        finish = choice.get("finish_reason")
        tokens = payload["usage"]["completion_tokens"]
    except (KeyError, IndexError, TypeError):
        return ProbeResult(False, f"answer is not a chat completion: {str(payload)[:300]}")
    served = payload.get("model")
    if served != model:
        return ProbeResult(False, f"answered as model {served!r}, expected {model!r}")
    if not text.strip() or not finish or not tokens:
        return ProbeResult(False, f"empty generation: text={text!r} finish_reason={finish} tokens={tokens}")
    return ProbeResult(True, f"{tokens} tokens, finish_reason={finish}", text=text, latency_s=latency)


async def reported_config(session: aiohttp.ClientSession, base: str, engine: Engine) -> dict[str, object]:
    """GET each of the engine's config endpoints (or its older name) and flatten the answers."""
    answers: dict[str, object] = {}
    for path in engine.config_endpoints():
        for candidate in (path, engine.endpoint_fallbacks.get(path)):
            if candidate is None:
                continue
            try:
                async with session.get(base + candidate, timeout=aiohttp.ClientTimeout(total=10)) as r:
                    if r.status != 200:
                        continue
                    answers[path] = await (r.text() if path == engine.metrics_path else r.json(content_type=None))
                    break
            except (aiohttp.ClientError, TimeoutError, OSError, ValueError):
                continue
    return engine.effective_config(answers)


async def metrics(session: aiohttp.ClientSession, base: str, engine: Engine) -> Metrics | None:
    try:
        async with session.get(base + engine.metrics_path, timeout=aiohttp.ClientTimeout(total=5)) as r:
            if r.status != 200:
                return None
            return engine.parse_metrics(await r.text())
    except (aiohttp.ClientError, TimeoutError, OSError):
        return None


def compare_configs(
    configs: list[dict[str, object]], soft: frozenset[str] = frozenset()
) -> tuple[list[str], list[str]]:
    """Fields that differ across replicas: (hard differences, soft differences like KV block counts)."""
    hard, soft_diffs = [], []
    keys = sorted({k for c in configs for k in c})
    for key in keys:
        values = [c.get(key) for c in configs]
        if len({repr(v) for v in values}) > 1:
            line = f"{key}: " + ", ".join(f"replica {i}={v!r}" for i, v in enumerate(values))
            (soft_diffs if key in soft else hard).append(line)
    return hard, soft_diffs
