"""SGLang's readiness, config, load and reasoning contracts through fleetgen's real probe/launcher code.

The server is a named stand-in (standin_server.py) replaying sglang 0.5.12's response shapes from
sglang/srt/entrypoints/http_server.py, v1_loads.py, openai/protocol.py and
observability/metrics_collector.py; it is spawned as the replica process, like a real engine.
"""

from __future__ import annotations

import asyncio
import socket
import sys
import time
from pathlib import Path

import aiohttp
import psutil
import pytest

from fleetgen.errors import ReplicaStartError
from fleetgen.fleet import net, probe, spawn, verify
from fleetgen.fleet.config import FleetConfig
from fleetgen.fleet.engines import Phase, ReplicaSpec
from fleetgen.fleet.engines.sglang import SglangEngine
from fleetgen.fleet.process import stop_processes
from fleetgen.fleet.state import ReplicaState

STANDIN = Path(__file__).with_name("standin_server.py")
SEED_ARGS = (
    "--reasoning-parser",
    "qwen3",
    "--attention-backend",
    "flashinfer",
    "--mem-fraction-static",
    "0.85",
    "--chunked-prefill-size",
    "4096",
    "--mamba-scheduler-strategy",
    "extra_buffer",
    "--mamba-ssm-dtype",
    "bfloat16",
)
SECRET = "sk-standin-secret"


class StandinSglang(SglangEngine):
    """SGLang's engine class with its real argv, run by the stand-in server instead of sglang."""

    def __init__(self, *standin_args: str) -> None:
        self.standin_args = list(standin_args)

    def command(self, spec: ReplicaSpec, python: str) -> list[str]:
        return [python, str(STANDIN), *self.server_args(spec), *self.standin_args]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(engine: StandinSglang, tmp: Path, index: int = 0, **kw) -> tuple[ReplicaState, object, ReplicaSpec]:
    spec = ReplicaSpec(
        index=index,
        model="/models/Qwen3.6-27B",
        served_model_name="qwen36",
        host="127.0.0.1",
        port=free_port(),
        max_running_requests=64,
        context_length=8192,
        extra_args=SEED_ARGS,
        **kw,
    )
    log = tmp / f"replica-{index}.log"
    log.write_bytes(b"")
    proc = spawn.spawn(engine, spec, log, sys.executable, {})
    cmd = engine.command(spec, sys.executable)
    state = ReplicaState(
        index=index,
        endpoint=net.endpoint_of(spec),
        pid=proc.pid,
        create_time=psutil.Process(proc.pid).create_time(),
        engine="sglang",
        model=spec.model,
        served_model_name=spec.served_model_name,
        log_path=str(log),
        command=spawn.redact(cmd, spec.api_key),
    )
    return state, proc, spec


def stop(*states: ReplicaState) -> None:
    stop_processes([(s.pid, s.create_time, s.boot_time) for s in states], grace_s=2)


def config(tmp: Path) -> FleetConfig:
    return FleetConfig(engine="sglang", state_dir=tmp, startup_timeout_s=60, stall_timeout_s=60)


async def get(session: aiohttp.ClientSession, url: str) -> tuple[int | None, object]:
    try:
        async with session.get(url) as r:
            return r.status, await r.json(content_type=None) if r.content_type == "application/json" else await r.text()
    except aiohttp.ClientError:
        return None, None


def test_readiness_goes_refused_then_up_not_ready_then_ready_then_probe(tmp_path):
    engine = StandinSglang("--standin-listen-after", "1.5", "--standin-ready-after", "2.5")
    replica, proc, spec = start(engine, tmp_path, api_key=SECRET)
    seen: list[Phase] = []
    details: list[str] = []

    async def scenario():
        async with aiohttp.ClientSession(headers=probe.auth_headers(SECRET)) as s:
            status, _ = await get(s, replica.endpoint + "/model_info")
            assert status is None  # connection refused while loading
            deadline = time.monotonic() + 20
            while (await get(s, replica.endpoint + "/model_info"))[0] != 200:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.1)
            health, _ = await probe.health(s, replica.endpoint, engine)
            assert health == 503  # up, not ready: SGLang is still Starting
        return await verify.wait_ready(
            engine, replica, proc, config(tmp_path), SECRET, lambda p: (seen.append(p.phase), details.append(p.detail))
        )

    try:
        reported = asyncio.run(scenario())
    finally:
        stop(replica)
    assert seen[-1] == Phase.READY and Phase.PROBING in seen
    assert Phase.LOADING in seen and seen.index(Phase.LOADING) < seen.index(Phase.PROBING)
    assert reported["attention_backend"] == "flashinfer"
    # The graph-capture times the engine logged: on the replica's state and in its ready line.
    assert replica.startup_timings == {"cuda graph capture": 3.19, "piecewise graph capture": 7.83}
    assert details[-1].endswith("; cuda graph capture 3.2s; piecewise graph capture 7.8s")
    assert reported["mem_fraction_static"] == 0.85
    assert reported["max_running_requests"] == 64 and reported["context_length"] == 8192
    assert reported["mamba_scheduler_strategy"] == "extra_buffer" and reported["reasoning_parser"] == "qwen3"
    assert reported["model_path"] == "/models/Qwen3.6-27B" and reported["version"] == "0.5.12"
    # /server_info carries server_args.api_key; nothing of it reaches the effective config or state.
    assert SECRET not in repr(reported) and SECRET not in repr(replica.model_dump())
    assert "***" in replica.command


def test_fatal_log_line_fails_fast_with_the_kv_pool_hint(tmp_path):
    engine = StandinSglang(
        "--standin-fatal",
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
        "Current value: mem_fraction_static=0.85",
    )
    replica, proc, _ = start(engine, tmp_path)
    try:
        with pytest.raises(ReplicaStartError) as err:
            asyncio.run(verify.wait_ready(engine, replica, proc, config(tmp_path), None, None))
    finally:
        stop(replica)
    assert "Not enough memory" in str(err.value)
    assert "raise --mem-fraction-static" in err.value.hint


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """Three ready stand-ins: two alike, one with another memory fraction, one speaking 0.5.4's endpoint names."""
    tmp = tmp_path_factory.mktemp("standins")
    a = start(StandinSglang("--standin-max-total-num-tokens", "500000"), tmp, 0)
    b = start(StandinSglang("--standin-max-total-num-tokens", "498000", "--mem-fraction-static", "0.80"), tmp, 1)
    old = start(StandinSglang("--standin-old"), tmp, 2)
    replicas = [a[0], b[0], old[0]]
    try:
        for r in replicas:
            deadline = time.monotonic() + 30
            while True:
                try:
                    socket.create_connection(("127.0.0.1", int(r.endpoint.rsplit(":", 1)[1])), timeout=1).close()
                    break
                except OSError:
                    assert time.monotonic() < deadline, Path(r.log_path).read_text()
                    time.sleep(0.2)
        yield replicas
    finally:
        stop(*replicas)


def run(coro_fn):
    async def wrapper():
        async with aiohttp.ClientSession() as s:
            return await coro_fn(s)

    return asyncio.run(wrapper())


def test_configs_compared_field_by_field(fleet):
    eng = SglangEngine()
    configs = run(lambda s: asyncio.gather(*(probe.reported_config(s, r.endpoint, eng) for r in fleet[:2])))
    hard, soft = probe.compare_configs(list(configs), verify.SOFT_CONFIG_FIELDS)
    assert hard == ["mem_fraction_static: replica 0=0.85, replica 1=0.8"]
    assert soft == ["max_total_num_tokens: replica 0=500000, replica 1=498000"]


def test_older_server_info_name_is_read_when_the_new_one_is_missing(fleet):
    eng = SglangEngine()
    reported = run(lambda s: probe.reported_config(s, fleet[2].endpoint, eng))
    assert reported["attention_backend"] == "flashinfer" and reported["model_path"] == "/models/Qwen3.6-27B"


def test_metrics_and_loads_are_parsed(fleet):
    eng = SglangEngine()
    m = run(lambda s: probe.metrics(s, fleet[0].endpoint, eng))
    assert (m.running, m.waiting, m.kv_cache_usage) == (3.0, 2.0, 0.25)
    assert m.extra["gen_throughput"] == 812.5 and m.generation_tokens_total is not None
    loads = run(lambda s: get(s, fleet[0].endpoint + eng.loads_path))
    lm = eng.parse_loads(loads[1])
    assert (lm.running, lm.waiting, lm.kv_cache_usage, lm.extra["gen_throughput"]) == (3.0, 2.0, 0.25, 812.5)
    old = run(lambda s: get(s, fleet[2].endpoint + "/get_load"))
    om = eng.parse_loads(old[1])
    assert (om.running, om.waiting) == (3.0, 2.0)


def test_generation_probe_accepts_reasoning_and_thinking_can_be_switched_off(fleet):
    result = run(lambda s: probe.generation_probe(s, fleet[0].endpoint, "qwen36"))
    assert result.ok, result.detail
    assert "Paris" in result.text

    async def chat(s, **extra):
        body = {"model": "qwen36", "messages": [{"role": "user", "content": "hi"}], **extra}
        async with s.post(fleet[0].endpoint + "/v1/chat/completions", json=body) as r:
            return (await r.json())["choices"][0]["message"]

    on = run(lambda s: chat(s))
    off = run(lambda s: chat(s, chat_template_kwargs={"enable_thinking": False}))
    joined = run(lambda s: chat(s, separate_reasoning=False))
    assert on["reasoning_content"] and "<think>" not in on["content"]
    assert off["reasoning_content"] is None
    assert joined["reasoning_content"] is None and joined["content"].startswith("<think>")
    wrong = run(lambda s: probe.generation_probe(s, fleet[0].endpoint, "other-model"))
    assert not wrong.ok and "404" in wrong.detail
