"""fleetgen's native /generate path against SGLang 0.5.12: its real parsers on CPU, its H200 answers replayed.

native_standin.py runs in .venv-sglang with SGLang's own ReasoningParser and FunctionCallParser and replays
fixtures/native-0.5.12 (captured on the H200, 2026-12-02) for the routes that need the model.
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import time
from pathlib import Path

import aiohttp
import pytest

from fleetgen.errors import ConfigError
from fleetgen.fleet.engines.sglang_validate import sglang_python
from fleetgen.generate.turns.native import native_chat, sampling_params
from fleetgen.generate.turns.paths import choose, probe_bodies

HERE = Path(__file__).resolve().parent
FIX = HERE / "fixtures" / "native-0.5.12"
TOOL_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
# What the stand-in "samples" on prompts no capture holds: reasoning closed, then a call (the turn opens in reasoning).
SCRIPT = "Checking.</think>Let me check. " + TOOL_CALL


def fixture(name: str) -> dict:
    return json.loads(next(FIX.glob(f"*-{name}.json")).read_text())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_standin(tmp_path: Path, *extra: str):
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "generation_config.json").write_text(json.dumps({"top_k": 20, "do_sample": True}))
    port = free_port()
    proc = subprocess.Popen(
        [
            str(sglang_python()),
            str(HERE / "native_standin.py"),
            "--port",
            str(port),
            "--model-path",
            str(model),
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    endpoint = f"http://127.0.0.1:{port}"
    for _ in range(600):
        if proc.poll() is not None:
            raise RuntimeError(f"stand-in exited: {proc.stdout.read()[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, endpoint
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("stand-in did not listen within 60 s")


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    proc, endpoint = start_standin(tmp_path_factory.mktemp("native"), "--script", SCRIPT)
    yield endpoint
    proc.kill()
    proc.wait()


def run(coro):
    return asyncio.run(coro)


async def _post(endpoint: str, path: str, body: dict) -> dict:
    async with aiohttp.ClientSession() as http, http.post(endpoint + path, json=body) as r:
        return await r.json()


async def _log(endpoint: str) -> list[dict]:
    async with aiohttp.ClientSession() as http, http.get(endpoint + "/standin/log") as r:
        return await r.json()


@pytest.mark.parametrize(
    "name",
    [
        p.stem[3:]
        for p in sorted(FIX.glob("*.json"))
        if p.stem[3:].startswith(("separate_reasoning", "parse_function_call"))
    ],
)
def test_the_real_parsers_on_cpu_answer_as_the_h200_did(standin, name):
    cap = fixture(name)
    assert run(_post(standin, cap["path"], cap["request"])) == cap["response"]


def test_a_server_whose_chat_has_no_ids_gets_the_native_path_checked_against_its_chat(standin):
    async def go():
        async with aiohttp.ClientSession() as http:
            return await choose(http, standin, "model", [{"model": "model", "temperature": 0.7, "top_p": 1.0}])

    path = run(go())
    assert path.native is not None, path.reason
    # The server reports its parsers by their canonical names (qwen25 is served as "qwen").
    assert path.native.reasoning_parser == "qwen3" and path.native.tool_call_parser == "qwen"
    assert path.native.model_defaults == {"top_k": 20}  # from the model's generation_config.json
    # The captured chat answer put every sampled token in reasoning_content: SGLang forces reasoning there.
    (key,) = probe_bodies("model", [{}]).keys()
    assert path.native.forced[key] is True
    calls = [e["body"] for e in run(_log(standin)) if e["path"] == "/generate"]
    assert calls and calls[-1]["sampling_params"]["top_k"] == 20


def test_a_native_turn_records_the_servers_ids_and_splits_as_its_chat_does(standin):
    chat_cap, gen_cap, tok_cap = fixture("chat_greedy_token_ids"), fixture("generate_greedy"), fixture("tokenize_plain")

    async def go():
        async with aiohttp.ClientSession() as http:
            path = await choose(http, standin, "model", [{}])
            return await native_chat(http, standin, dict(chat_cap["request"]), 30, path.native)

    answer = run(go())
    message = chat_cap["response"]["choices"][0]["message"]
    assert (answer.content, answer.reasoning) == (message["content"], message["reasoning_content"])
    assert answer.finish_reason == chat_cap["response"]["choices"][0]["finish_reason"]
    assert answer.token_ids.prompt == tok_cap["response"]["tokens"]
    assert answer.token_ids.completion == gen_cap["response"]["output_ids"]
    assert answer.completion_tokens == chat_cap["response"]["usage"]["completion_tokens"]


def test_a_tool_turn_keeps_the_markup_for_the_parser_and_returns_openai_calls(standin):
    cap = fixture("tokenize_tools")
    body = {**cap["request"], "max_tokens": 32, "temperature": 0.7}

    async def go():
        async with aiohttp.ClientSession() as http:
            path = await choose(http, standin, "model", [{}])
            return await native_chat(http, standin, body, 30, path.native)

    answer = run(go())
    assert answer.finish_reason == "tool_calls" and answer.content == "Let me check."
    assert answer.reasoning == "Checking."
    (call,) = answer.tool_calls
    assert call["type"] == "function" and call["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    sent = [e["body"] for e in run(_log(standin)) if e["path"] == "/generate"][-1]
    assert sent["input_ids"] == cap["response"]["tokens"]
    assert sent["sampling_params"]["skip_special_tokens"] is False
    assert answer.token_ids.completion == [1000 + ord(ch) for ch in SCRIPT]


def test_a_server_whose_render_disagrees_with_its_chat_is_refused(tmp_path):
    proc, endpoint = start_standin(tmp_path, "--extra-prompt-token")
    try:

        async def go():
            async with aiohttp.ClientSession() as http:
                return await choose(http, endpoint, "model", [{}])

        with pytest.raises(ConfigError) as e:
            run(go())
        assert "17 tokens" in e.value.message and "16" in e.value.message and "--no-token-ids" in e.value.hint
    finally:
        proc.kill()
        proc.wait()


def test_sampling_params_carry_the_chat_requests_fields_and_the_model_defaults_only_where_it_is_silent():
    body = {
        "model": "m",
        "messages": [],
        "temperature": 0.6,
        "top_p": 0.9,
        "max_tokens": 64,
        "seed": 7,
        "repetition_penalty": 1.1,
        "chat_template_kwargs": {"enable_thinking": False},
    }
    params = sampling_params(body, {"top_k": 20, "repetition_penalty": 1.05, "temperature": 0.6})
    assert params == {
        "top_k": 20,
        "temperature": 0.6,
        "top_p": 0.9,
        "max_new_tokens": 64,
        "sampling_seed": 7,
        "repetition_penalty": 1.1,
    }
