"""Read each replica's load from its engine a few times a second, off the request path, for `--concurrency auto`.

One GET per replica per poll on a session of its own (a poll never waits behind the job's
requests): the engine's Prometheus page (vLLM; SGLang with --enable-metrics, which fleets
fleetgen starts always have), else SGLang's load endpoint. The engine is recognised from what
the page says, so endpoints fleetgen did not start work too. A replica that reports no load
keeps its starting limit, and the run says so once.

Once the engine is known, the poll asks for its load lines alone (prometheus_client's `name[]`
filter), unzipped, where the server answers that: vLLM-CPU's whole page is mostly histograms,
which cost its API server several times the CPU of the load lines alone (bench/engine_scrape_cost.py;
BENCHMARKS.md, "figures the code cites").
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from urllib.parse import urlencode

import aiohttp

from fleetgen.fleet.engines import get_engine
from fleetgen.fleet.engines.base import Engine, Metrics
from fleetgen.fleet.probe import auth_headers
from fleetgen.generate.dispatch.auto_limit import LimitController, LimitPolicy, Reading
from fleetgen.generate.dispatch.dispatcher import Dispatcher
from fleetgen.generate.dispatch.graph_bound import read_graph_batch_size
from fleetgen.generate.dispatch.replica import Replica

log = logging.getLogger(__name__)

POLL_S = 1.0
# While a replica's limit still doubles (slow start, below the ceiling) it is read this often: a job's first
# seconds are spent below what the engine runs, and a doubling a second was slow to reach it on a GPU
# (BENCHMARKS.md, "full speed").
RAMP_POLL_S = 0.25
LOAD_PATHS = ("/v1/loads", "/get_load")  # SGLang 0.5.12, and its older name
# An engine evicting its prefix cache this share of the time is said (once): it is what slowed SGLang 5x
# (BENCHMARKS.md).
EVICTION_SHARE = 0.2
_TIMEOUT = aiohttp.ClientTimeout(total=5)
_IDENTITY = {"Accept-Encoding": "identity"}  # a small page: gzip would only cost the engine CPU


@dataclass
class _Source:
    """Where one replica's load comes from, learnt at its first poll (and again after a replacement)."""

    endpoint: str
    engine: Engine | None = None
    path: str | None = None
    preemptions_total: float | None = None  # the counter at the previous reading
    told: bool = False
    eviction: tuple[float, float] | None = None  # (the engine's eviction seconds, our clock) at the previous reading
    told_eviction: bool = False
    bounded: bool = False  # the engine's own bound on what is worth holding was asked for (graph_bound.py)


def engine_of_page(text: str) -> Engine | None:
    """vLLM or SGLang, from the metric names on a /metrics page; None for a page of neither."""
    for name in ("vllm", "sglang"):
        if f"\n{name}:" in text or text.startswith(f"{name}:") or f" {name}:" in text:
            return get_engine(name)
    return None


class LoadPoller:
    """Polls every replica of `dispatcher` and sets its window from its LimitController."""

    def __init__(
        self, dispatcher: Dispatcher, policy: LimitPolicy, *, api_key: str | None = None, poll_s: float = POLL_S
    ) -> None:
        self.dispatcher = dispatcher
        self.poll_s = poll_s
        self.api_key = api_key
        clock = dispatcher.clock
        self.controllers = [LimitController(policy.start, policy, clock) for r in dispatcher.replicas]
        for i, c in enumerate(self.controllers):
            dispatcher.set_window(i, c.limit)
        self._sources: list[_Source | None] = [None] * len(dispatcher.replicas)

    async def run(self) -> None:
        """Until cancelled."""
        n = len(self.dispatcher.replicas)
        connector = aiohttp.TCPConnector(limit=n, limit_per_host=1)
        headers = auth_headers(self.api_key) | _IDENTITY
        async with aiohttp.ClientSession(connector=connector, headers=headers) as http:
            while True:
                await asyncio.sleep(min(self.poll_s, RAMP_POLL_S) if self.ramping() else self.poll_s)
                await asyncio.gather(*(self.poll_one(http, i) for i in range(n)))

    def ramping(self) -> bool:
        """Some replica's limit is still in slow start below the ceiling: read it more often."""
        return any(c.slow_start and c.limit < c.ceiling for c in self.controllers)

    async def poll_one(self, http: aiohttp.ClientSession, index: int) -> None:
        replica = self.dispatcher.replicas[index]
        if replica.stats.frozen:
            return  # no answer to wait for (freeze.py): its 5 s timeout would hold back every replica's poll
        src = self._sources[index]
        if src is None or src.endpoint != replica.endpoint:  # first poll, or a replacement on a new address
            src = self._sources[index] = _Source(replica.endpoint)
        metrics = await self._read(http, src)
        if metrics is None:
            if not src.told and src.engine is None:
                src.told = True
                log.warning(
                    f"{replica.endpoint} reports no load (/metrics, /v1/loads); --concurrency auto keeps "
                    f"{replica.window} in flight there"
                )
            return
        if not src.bounded and src.engine is not None and src.engine.name == "sglang":
            src.bounded = True
            await self.bound(http, index, src.endpoint)
        reading = self.reading(src, metrics)
        replica.stats.engine_running = reading.running
        replica.stats.engine_waiting = reading.waiting
        replica.stats.engine_kv_usage = reading.kv_usage
        replica.stats.engine_preemptions += int(reading.preempted)
        self.eviction(src, metrics, replica)
        if replica is not self.dispatcher.replicas[index]:
            return  # replaced while we read: its controller starts from the next poll
        limit = self.controllers[index].update(reading, replica.outstanding)
        self.dispatcher.set_window(index, limit)

    async def bound(self, http: aiohttp.ClientSession, index: int, endpoint: str) -> None:
        """Hold no more on an SGLang replica than it decodes with CUDA graphs (graph_bound.py); said once."""
        size = await read_graph_batch_size(http, endpoint)
        if size is None or size >= self.controllers[index].ceiling:
            return
        self.controllers[index].bound(size)
        log.info(
            f"{endpoint}: SGLang decodes batches past {size} without CUDA graphs (slower per token); --concurrency "
            f"auto holds at most {self.controllers[index].ceiling} there (raise the server's --cuda-graph-max-bs "
            "for larger batches)"
        )

    def eviction(self, src: _Source, m: Metrics, replica: Replica) -> None:
        """Add the engine's time spent evicting its prefix cache to the replica's stats; say so once when it is
        a large share of the time (SGLang 0.5.12's eviction walks every cached answer: docs/sglang.md)."""
        if m.eviction_seconds_total is None:
            return
        now = self.dispatcher.clock()
        before, src.eviction = src.eviction, (m.eviction_seconds_total, now)
        if before is None or m.eviction_seconds_total < before[0] or now <= before[1]:
            return  # a first reading, or a restarted engine: a new baseline
        spent = m.eviction_seconds_total - before[0]
        replica.stats.engine_eviction_s += spent
        if spent / (now - before[1]) >= EVICTION_SHARE and not src.told_eviction:
            src.told_eviction = True
            log.warning(
                f"{replica.endpoint} spent {100 * spent / (now - before[1]):.0f}% of the last "
                f"{now - before[1]:.1f}s evicting its prefix cache: its cache is full of finished answers and "
                "each step pays for it. Restart that server with --disable-radix-cache (fleetgen's own SGLang "
                "fleets start so; docs/sglang.md, 'The radix cache and long jobs')"
            )

    @staticmethod
    def reading(src: _Source, m: Metrics) -> Reading:
        """The controller's view of one report: preemptions since the previous one."""
        preempted = 0.0
        if m.preemptions_total is not None:
            if src.preemptions_total is not None and m.preemptions_total >= src.preemptions_total:
                preempted = m.preemptions_total - src.preemptions_total
            src.preemptions_total = m.preemptions_total
        if m.retracted:
            preempted = max(preempted, m.retracted)
        return Reading(running=m.running, waiting=m.waiting, kv_usage=m.kv_cache_usage, preempted=preempted)

    async def _read(self, http: aiohttp.ClientSession, src: _Source) -> Metrics | None:
        if src.path is None:  # learn the source: the Prometheus page, else SGLang's load endpoint
            status, text = await _get(http, src.endpoint + "/metrics")
            engine = engine_of_page(text) if status == 200 else None
            if engine is not None:
                src.engine, src.path = engine, await load_path(http, src.endpoint, engine)
                return engine.parse_load(text)
            for path in LOAD_PATHS:
                status, text = await _get(http, src.endpoint + path)
                if status == 200 and (m := _loads(text)) is not None:
                    src.engine, src.path = get_engine("sglang"), path
                    return m
            return None
        status, text = await _get(http, src.endpoint + src.path)
        if status != 200:
            return None
        assert src.engine is not None
        return src.engine.parse_load(text) if src.path.startswith("/metrics") else _loads(text)


def load_page(engine: Engine) -> str:
    """The Prometheus page narrowed to `engine`'s load metrics.

    At /metrics/, with the slash: vLLM answers /metrics itself (prometheus-fastapi-instrumentator,
    which ignores the filter) and mounts prometheus_client's own app, which applies it, at /metrics/."""
    if not engine.load_metrics:
        return "/metrics"
    return "/metrics/?" + urlencode([("name[]", name) for name in sorted(engine.load_metrics)])


async def load_path(http: aiohttp.ClientSession, endpoint: str, engine: Engine) -> str:
    """load_page where the server answers it with the load, else the whole page: SGLang 0.5.12 answers
    the filter with an empty page (its multiprocess collector's metrics are not found by name)."""
    path = load_page(engine)
    status, text = await _get(http, endpoint + path)
    return path if status == 200 and engine.parse_load(text).running is not None else "/metrics"


def _loads(text: str) -> Metrics | None:
    import orjson

    try:
        payload = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return get_engine("sglang").parse_loads(payload)  # type: ignore[attr-defined]


async def _get(http: aiohttp.ClientSession, url: str) -> tuple[int, str]:
    try:
        async with http.get(url, timeout=_TIMEOUT) as r:
            return r.status, await r.text()
    except (aiohttp.ClientError, TimeoutError, OSError, UnicodeDecodeError):
        return 0, ""
