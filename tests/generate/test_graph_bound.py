"""`--concurrency auto` on SGLang holds no more than the server decodes with CUDA graphs.

The server is a STAND-IN serving SGLang 0.5.12's real /metrics page and /server_info (captured on the
H200) as fixed text: only what the poller reads and the limit it leads to are under test.
"""

from __future__ import annotations

import json
import logging
import random
from pathlib import Path

import aiohttp
from aiohttp import web

from fleetgen.generate.config.sections import RoutingConfig
from fleetgen.generate.dispatch.auto_limit import LimitController, LimitPolicy, Reading
from fleetgen.generate.dispatch.dispatcher import Dispatcher
from fleetgen.generate.dispatch.graph_bound import graph_batch_size
from fleetgen.generate.dispatch.load_poll import LoadPoller

FIXTURES = Path(__file__).resolve().parents[1] / "fleet" / "sglang" / "fixtures"
SGLANG_PAGE = (FIXTURES / "h200-metrics.txt").read_text()
SERVER_INFO = json.loads((FIXTURES / "h200-get_server_info.json").read_text())
VLLM_PAGE = (Path(__file__).resolve().parent / "fixtures" / "vllm-cpu-metrics.txt").read_text()


def test_the_graph_batch_size_is_read_from_server_info():
    assert SERVER_INFO["cuda_graph_max_bs"] == 256 and graph_batch_size(SERVER_INFO) == 256
    assert graph_batch_size({**SERVER_INFO, "disable_cuda_graph": True}) is None  # no graphs: nothing to stay under
    assert graph_batch_size({**SERVER_INFO, "dp_size": 2}) == 512  # two schedulers, each with its graphs
    assert graph_batch_size({"model_path": "m"}) is None
    assert graph_batch_size({"cuda_graph_max_bs": None}) is None
    assert graph_batch_size([]) is None


def test_a_bound_limit_stops_there_and_grows_no_further():
    c = LimitController(16, LimitPolicy(start=16))
    c.bound(256)
    for _ in range(8):  # an engine that never queues: slow start would double to the policy's 1,024
        c.update(Reading(running=c.limit, waiting=0, kv_usage=0.1), in_flight=c.limit)
    assert c.limit == c.ceiling == 256
    c.update(Reading(running=900, waiting=50, kv_usage=0.5), in_flight=256)  # "engine runs more" is bound too
    assert c.limit == 256
    high = LimitController(1024, LimitPolicy(start=1024))
    high.bound(256)
    assert high.limit == 256 and high.last_reason == "engine bound"
    low = LimitController(16, LimitPolicy(start=16))
    low.bound(1)
    assert low.ceiling == LimitPolicy().floor


async def _serve(routes: dict[str, str], asked: list[str]) -> tuple[web.AppRunner, str]:
    app = web.Application()
    for path, text in routes.items():

        async def page(request: web.Request, text: str = text) -> web.Response:
            asked.append(request.path)
            return web.Response(text=text)

        app.router.add_get(path, page)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]


async def test_an_sglang_replica_is_bound_once_and_a_vllm_replica_never(caplog):
    asked_sglang: list[str] = []
    asked_vllm: list[str] = []
    r0, sglang = await _serve({"/metrics": SGLANG_PAGE, "/server_info": json.dumps(SERVER_INFO)}, asked_sglang)
    r1, vllm = await _serve({"/metrics": VLLM_PAGE}, asked_vllm)
    caplog.set_level(logging.INFO, logger="fleetgen")
    try:
        d = Dispatcher([sglang, vllm], 16, RoutingConfig(hedge=False), rng=random.Random(0))
        poller = LoadPoller(d, LimitPolicy(start=16))
        async with aiohttp.ClientSession() as http:
            for _ in range(3):
                await poller.poll_one(http, 0)
                await poller.poll_one(http, 1)
        assert [c.ceiling for c in poller.controllers] == [256, LimitPolicy().ceiling]
        assert asked_sglang.count("/server_info") == 1 and "/server_info" not in asked_vllm
        said = [r.message for r in caplog.records if "CUDA graphs" in r.message]
        assert len(said) == 1 and said[0].startswith(f"{sglang}: SGLang decodes batches past 256 without CUDA graphs")
        poller.controllers[0].limit = 256  # slow start has reached the bound: no more fast polling for it
        poller.controllers[1].slow_start = False
        assert not poller.ramping()
    finally:
        await r0.cleanup()
        await r1.cleanup()
