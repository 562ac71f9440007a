"""Which path each server's turns take (chat, or SGLang's native /generate), decided by what the server answers.

A server whose chat answer carries token ids (vLLM, SGLang >= 0.5.17) keeps the chat path. An SGLang
server whose chat answer carries none (0.5.12) is driven through /generate (native.py), after a
check that the two paths agree on it: the rendered prompt has the chat endpoint's length and a greedy
answer splits into the same reasoning and content. Anything else keeps the chat path without ids.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from fleetgen.errors import ConfigError, FleetgenError
from fleetgen.generate.config.sampling import TOKEN_ID_FIELDS, SamplingConfig
from fleetgen.generate.dispatch.client import ChatAnswer, Rejected, TransientError, chat
from fleetgen.generate.turns.native import (
    MODEL_DEFAULTS,
    NativeServer,
    render,
    sample,
    sampling_params,
    split_reasoning,
    switches_key,
    unsupported_fields,
)

PROBE_MESSAGES = [{"role": "user", "content": "Write one sentence about the sea."}]
PROBE_TOKENS = 16
PROBE_TIMEOUT_S = 900.0  # a first request may wait on kernel compiles


@dataclass(frozen=True)
class TurnPath:
    """The path one endpoint's turns take, and why."""

    endpoint: str
    native: NativeServer | None
    reason: str

    @property
    def name(self) -> str:
        return "native /generate" if self.native is not None else "chat"


async def server_info(http: aiohttp.ClientSession, endpoint: str) -> dict[str, Any] | None:
    """SGLang's server arguments (/server_info, or /get_server_info before 0.5.13); None where neither answers."""
    for route in ("/server_info", "/get_server_info"):
        try:
            async with http.get(endpoint + route, timeout=aiohttp.ClientTimeout(total=10)) as r:
                if r.status == 200:
                    payload = await r.json(content_type=None)
                    if isinstance(payload, dict):
                        return payload
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError):
            continue
    return None


def model_defaults(info: dict[str, Any]) -> dict[str, Any]:
    """The sampling defaults SGLang's chat endpoint reads from the model's generation_config.json."""
    if info.get("sampling_defaults", "model") != "model":
        return {}
    model_path = Path(str(info.get("model_path") or ""))
    config = model_path / "generation_config.json"
    if not model_path.is_dir():
        raise ConfigError(
            f"the server's model path {model_path} is not readable here: the sampling defaults its chat endpoint takes "
            "from generation_config.json cannot be applied on the native /generate path",
            hint="run generate where the model directory is readable, or pass --no-token-ids to keep the chat path "
            "(rows then carry no token ids)",
        )
    if not config.is_file():
        return {}
    try:
        data = json.loads(config.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"{config}: cannot be read as JSON ({e})", hint="fix or remove the file") from None
    return {k: data[k] for k in MODEL_DEFAULTS if data.get(k) is not None}


def probe_bodies(model: str, bodies: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """One greedy probe per distinct set of template switches the job sends."""
    out: dict[str, dict[str, Any]] = {}
    for b in bodies:
        probe = {"model": model, "messages": PROBE_MESSAGES, "max_tokens": PROBE_TOKENS, "temperature": 0.0}
        for k in ("chat_template_kwargs", "reasoning_effort"):
            if b.get(k) is not None:
                probe[k] = b[k]
        out.setdefault(switches_key(probe), probe)
    return out


async def choose(http: aiohttp.ClientSession, endpoint: str, model: str, bodies: Sequence[dict[str, Any]]) -> TurnPath:
    """Probe one endpoint: the chat path where its chat answer has ids, else the native path where it agrees."""
    info = await server_info(http, endpoint)
    if info is None or "model_path" not in info:
        return TurnPath(endpoint, None, "no SGLang server info: the chat path, with the ids its answers carry")
    probes = probe_bodies(model, bodies)
    first = next(iter(probes.values()))
    try:
        answer = await chat(http, endpoint, {**first, **TOKEN_ID_FIELDS}, PROBE_TIMEOUT_S)
    except Rejected as e:  # a server that refuses the id fields outright has none to give
        return TurnPath(
            endpoint,
            None,
            f"its chat endpoint refuses the token-id fields ({e.message}): turns are recorded without ids",
        )
    if answer.token_ids is not None:
        return TurnPath(endpoint, None, "its chat endpoint returns token ids")
    unknown = sorted({f for b in bodies for f in unsupported_fields(b)})
    if unknown:
        raise ConfigError(
            f"{endpoint}: the job sends {', '.join(unknown)}, which the native /generate path cannot pass as the chat "
            "endpoint would",
            hint="drop them from the profiles, or pass --no-token-ids to keep the chat path (rows then carry no ids)",
        )
    server = NativeServer(info.get("reasoning_parser"), info.get("tool_call_parser"), model_defaults(info))
    for key, probe in probes.items():
        try:
            # The first probe's answer (ids asked for, none given) is that probe's chat reference: not sent again.
            reference = answer if probe is first else await chat(http, endpoint, probe, PROBE_TIMEOUT_S)
            server.forced[key] = await _calibrate(http, endpoint, server, probe, reference)
        except (TransientError, Rejected) as e:
            raise ConfigError(
                f"{endpoint}: its chat endpoint returns no token ids, and the native /generate path failed its check: "
                f"{e.message}",
                hint="pass --no-token-ids to keep the chat path (rows then carry no token ids)",
            ) from None
    return TurnPath(endpoint, server, "its chat endpoint returns no token ids; /generate returns the sampled ids")


async def _calibrate(
    http: aiohttp.ClientSession, endpoint: str, server: NativeServer, probe: dict[str, Any], reference: ChatAnswer
) -> bool:
    """Check both paths agree on a greedy probe; whether the chat endpoint forces reasoning under these switches."""
    prompt_ids = await render(http, endpoint, probe, PROBE_TIMEOUT_S)
    where = f"{endpoint} (switches {switches_key(probe)})"
    if len(prompt_ids) != reference.prompt_tokens:
        raise ConfigError(
            f"{where}: the prompt /v1/tokenize renders has {len(prompt_ids)} tokens, the chat endpoint's "
            f"{reference.prompt_tokens}: the native path would not feed the target what its chat endpoint does",
            hint="pass --no-token-ids to keep the chat path (rows then carry no token ids), and report this",
        )
    text, output_ids, _ = await sample(
        http, endpoint, prompt_ids, sampling_params(probe, server.model_defaults), PROBE_TIMEOUT_S
    )
    want = (reference.reasoning or None, reference.content or None)
    matches = []
    for forced in (False, True):
        reasoning, content = await split_reasoning(http, endpoint, server, text, forced, PROBE_TIMEOUT_S)
        if (reasoning or None, content or None) == want and len(output_ids) == reference.completion_tokens:
            matches.append(forced)
    if not matches:
        raise ConfigError(
            f"{where}: a greedy answer differs between the chat endpoint ({_short(want)}) and /generate "
            f"({_short((None, text))}, {len(output_ids)} tokens vs {reference.completion_tokens})",
            hint="pass --no-token-ids to keep the chat path (rows then carry no token ids), and report this",
        )
    return matches[-1] if len(matches) == 1 else False


def _short(pair: tuple[str | None, str | None]) -> str:
    reasoning, content = pair
    return f"reasoning={(reasoning or '')[:60]!r} content={(content or '')[:60]!r}"


async def choose_all(
    http: aiohttp.ClientSession, endpoints: Sequence[str], model: str, bodies: Sequence[dict[str, Any]]
) -> dict[str, TurnPath]:
    """The path of every endpoint that answers; an endpoint down at start takes the path the others took."""
    results = await asyncio.gather(*(choose(http, e, model, bodies) for e in endpoints), return_exceptions=True)
    paths: dict[str, TurnPath] = {}
    for endpoint, result in zip(endpoints, results):
        if isinstance(result, TurnPath):
            paths[endpoint] = result
        elif isinstance(result, ConfigError):
            raise result
        elif not isinstance(result, (TransientError, Rejected, FleetgenError)):
            raise result
    if paths:
        some = next(iter(paths.values()))
        for endpoint in endpoints:
            paths.setdefault(
                endpoint, TurnPath(endpoint, some.native, some.reason + " (as the other replicas; down at start)")
            )
    return paths


def describe(paths: dict[str, TurnPath]) -> str:
    """One line: which path the job's turns take, and why."""
    by: dict[tuple[str, str], int] = {}
    for p in paths.values():
        by[(p.name, p.reason)] = by.get((p.name, p.reason), 0) + 1
    return "; ".join(f"{name} on {n} endpoint{'s' if n != 1 else ''} ({reason})" for (name, reason), n in by.items())


async def fleet_paths(endpoints: Sequence[str], model: str, api_key: str | None) -> str:
    """What `up` says of a fresh fleet: the path a default job's turns would take, and why."""
    from fleetgen.generate.dispatch.client import new_session

    async with new_session(api_key, len(endpoints) + 4) as http:
        try:
            paths = await choose_all(http, endpoints, model, SamplingConfig().bodies(model))
        except ConfigError as e:
            return f"the native /generate path would be refused: {e.message}"
    return describe(paths) if paths else "not probed (no replica answered)"
