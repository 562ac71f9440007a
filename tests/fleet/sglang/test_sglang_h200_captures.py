"""fleetgen's sglang engine against what a real SGLang 0.5.12 said on the H200 (fixtures/h200-*).

Captured 2026-12-01 from a random-initialised Qwen3 (SmolLM2 tokenizer, Qwen3-style thinking template) served by
`fleetgen up --engine sglang --replicas 2 --replicas-per-gpu 2` and by a plain `python -m sglang.launch_server
--enable-metrics --reasoning-parser qwen3 --tool-call-parser qwen25`; trimmed, otherwise verbatim.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from fleetgen.fleet.engines import Phase
from fleetgen.fleet.engines.sglang import CONFIG_FIELDS, SglangEngine
from fleetgen.fleet.probe import generation_probe
from fleetgen.generate.dispatch.client import chat

FIX = Path(__file__).with_name("fixtures")
ENGINE = SglangEngine()


def fixture_json(name: str):
    return json.loads((FIX / name).read_text())


def log_lines(name: str) -> list[str]:
    return [line for line in (FIX / name).read_text().splitlines() if not line.startswith("# ")]


def test_phases_read_from_a_real_start_come_in_order():
    seen: list[tuple[Phase, str]] = []
    for line in log_lines("h200-replica-0.log"):
        phase = ENGINE.phase_of(line)
        if phase and (not seen or seen[-1][0] is not phase):
            seen.append((phase, line))
    assert [p for p, _ in seen] == [Phase.STARTING, Phase.LOADING, Phase.COMPILING, Phase.WARMING]
    assert "server_args=" in seen[0][1] and "Load weight begin" in seen[1][1]
    assert "Capture cuda graph begin" in seen[2][1] and "Uvicorn running on" in seen[3][1]
    assert any(ENGINE.ready_log_line in line for line in log_lines("h200-replica-0.log"))


def test_the_graph_capture_time_is_read_from_a_real_start():
    timed = [t for t in map(ENGINE.timing_of, log_lines("h200-replica-0.log")) if t]
    assert timed == [("cuda graph capture", 77.23)]  # flashinfer's first-batch JIT, cold (2026-12-01)


@pytest.mark.parametrize("name", ["h200-replica-0.log", "h200-replica-1.log", "h200-raw-server-ready.log"])
def test_no_line_of_a_healthy_real_server_reads_as_fatal(name):
    # Among them: "Ignore import error when loading sglang.srt.models.mimo_audio: Can not import FA3 in
    # sgl_kernel" and the /v1/loads AttributeError traceback; neither stops the server.
    assert [line for line in log_lines(name) if ENGINE.fatal_of(line)] == []


def test_effective_config_from_real_server_and_model_info():
    server = fixture_json("h200-get_server_info.json")
    cfg = ENGINE.effective_config({"/model_info": fixture_json("h200-model_info.json"), "/server_info": server})
    assert cfg["model_path"] == "/tmp/model" and cfg["model.model_type"] == "qwen3"
    assert cfg["model.architectures"] == ["Qwen3ForCausalLM"]
    assert cfg["version"] == "0.5.12" and cfg["mem_fraction_static"] == 0.5 and cfg["enable_metrics"] is True
    # SGLang reports the parser it runs: 'qwen25' on the command line is 'qwen' (deprecated name) here.
    assert cfg["tool_call_parser"] == "qwen" and cfg["reasoning_parser"] == "qwen3"
    assert cfg["max_total_num_tokens"] == 2266533
    assert (
        "api_key" in server
        and "api_key" not in cfg
        and set(cfg) - set(CONFIG_FIELDS) <= {"model.model_type", "model.architectures", "model.weight_version"}
    )


def test_real_metrics_parse_and_every_name_read_exists():
    text = (FIX / "h200-metrics.txt").read_text()
    m = ENGINE.parse_metrics(text)
    assert (m.running, m.waiting, m.generation_tokens_total, m.kv_cache_usage) == (
        0.0,
        0.0,
        8.0,
        0.0,
    )  # the warm-up request's 8 tokens
    for name in (
        "num_running_reqs",
        "num_queue_reqs",
        "generation_tokens_total",
        "token_usage",
        "gen_throughput",
        "cache_hit_rate",
        "num_used_tokens",
        "prompt_tokens_total",
        "num_retracted_reqs",
        "mamba_usage",
    ):
        assert f"\nsglang:{name}{{" in text, name
    assert set(m.extra) == {
        "gen_throughput",
        "cache_hit_rate",
        "num_used_tokens",
        "prompt_tokens_total",
        "num_retracted_reqs",
        "mamba_usage",
    }


def test_real_get_load_is_read():
    m = ENGINE.parse_loads(fixture_json("h200-get_load.json"))
    assert m is not None and (m.running, m.waiting) == (0.0, 0.0)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _serve(payload: dict) -> tuple[web.AppRunner, str]:
    async def handler(_request):
        return web.json_response(payload)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    port = _free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}"


async def test_a_real_unterminated_reasoning_answer_is_kept_and_probes_ok():
    # A thinking template and no </think> in the output: SGLang puts everything in reasoning_content and
    # content is null; usage carries reasoning_tokens.
    real = fixture_json("h200-chat-reasoning.json")["response"]
    assert real["choices"][0]["message"]["content"] is None and real["usage"]["reasoning_tokens"] == 24
    runner, base = await _serve(real)
    try:
        async with aiohttp.ClientSession() as session:
            answer = await chat(session, base, {"model": "model", "messages": []}, 10)
            probe = await generation_probe(session, base, "model")
    finally:
        await runner.cleanup()
    assert answer.content is None and answer.reasoning.startswith("ahua awa commemorated")
    assert answer.finish_reason == "length" and answer.completion_tokens == 24
    assert probe.ok, probe
