"""Warm each replica's sampling paths before it takes a job's requests ("compiling sampling kernels").

An engine compiles some kernels on their first use, not at start: SGLang 0.5.12 JIT-compiles
flashinfer's top-k/top-p sampling kernel on the first request with top_p < 1 (well over a minute
on an H200, with greedy requests waiting behind it: BENCHMARKS.md, "GPU: exact token ids from
SGLang 0.5.12 on one H200"), and its readiness probe is greedy.
A job's first requests would wait behind that compile, and the dispatcher would read the wait as a
slow replica (hedges, timeouts, ejection). So before a replica takes work, it gets one short
request per distinct sampling *path* the job will use, one after another (a batch mixing two
paths runs only the kernel of their union, so they must go alone), on every replica at once.
These requests bypass the dispatcher: its hedging, ejection and timeouts never see them.

A path is what selects a different kernel: greedy, plain temperature sampling, top_p < 1, top_k,
min_p, penalties, logprobs, a seed, and any engine-specific extra_body knob. Mixed batches choose
among the kernels of the single paths (SGLang `layers/sampler.py`: min_p wins, else any top-k/top-p
goes to the joint kernel), so warming each profile's own path covers them.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from fleetgen.generate.config.profiles import SamplingProfile
from fleetgen.generate.config.sampling import SamplingConfig
from fleetgen.generate.config.sections import TransportConfig, WarmupConfig
from fleetgen.generate.dispatch.client import Rejected, TransientError, backoff_delay, chat
from fleetgen.generate.dispatch.dispatcher import Dispatcher
from fleetgen.generate.dispatch.replica import Replica

log = logging.getLogger(__name__)

# Tokens each warm-up request asks for: one sampled at prefill, the rest in decode steps.
WARMUP_TOKENS = 4
WARMUP_PROMPT = "Say hello."
PHASE = "compiling sampling kernels"


@dataclass(frozen=True)
class SamplingPath:
    """One distinct kernel choice of the job, and a request body that takes it."""

    name: str
    body: dict[str, Any] = field(hash=False, compare=False)


def path_name(body: dict[str, Any]) -> str:
    """What selects the kernel for `body`, as a stable readable key (e.g. `top_p<1+min_p+seed`)."""
    temperature = body.get("temperature", 1.0)
    top_k = body.get("top_k")
    if temperature == 0 or top_k == 1:
        parts = ["greedy"]
    else:
        parts = []
        if body.get("top_p", 1.0) < 1:
            parts.append("top_p<1")
        if top_k is not None and top_k > 1:
            parts.append("top_k")
        if body.get("min_p"):
            parts.append("min_p")
        parts = parts or ["temperature"]
    if any(
        body.get(k) not in (None, n)
        for k, n in (("repetition_penalty", 1.0), ("presence_penalty", 0.0), ("frequency_penalty", 0.0))
    ):
        parts.append("penalties")
    if body.get("logprobs") or body.get("top_logprobs") or body.get("return_logprob"):
        parts.append("logprobs")
    if body.get("seed") is not None:
        parts.append("seed")
    parts += sorted(f"extra:{k}" for k in body.get("_extra_keys", ()))
    return "+".join(parts)


MIN_LENGTH_FIELDS = ("min_tokens", "min_new_tokens")


def job_body(sampling: SamplingConfig, model: str, profile: SamplingProfile | None) -> dict[str, Any]:
    """A short request with the sampling fields the job's requests of `profile` (or of the job) carry."""
    messages = [{"role": "user", "content": WARMUP_PROMPT}]
    body = sampling.body(model, messages, max_tokens=WARMUP_TOKENS, profile=profile, seed=sampling.seed)
    # Short whatever the profile asks: a floor on the answer's length (min_tokens 128, say) would make the
    # engine refuse the warm-up (SGLang: min_new_tokens must be <= max_new_tokens) though the job's requests pass.
    for key in MIN_LENGTH_FIELDS:
        if isinstance(body.get(key), int) and body[key] > WARMUP_TOKENS:
            body[key] = WARMUP_TOKENS
    return body


def sampling_paths(sampling: SamplingConfig, model: str) -> list[SamplingPath]:
    """The distinct paths of the job, in profile order: one body each (the first profile that takes it)."""
    paths: dict[str, SamplingPath] = {}
    for profile in sampling.profiles or [None]:
        body = job_body(sampling, model, profile)
        keyed = {**body, "_extra_keys": tuple(profile.extra_body) if profile is not None else ()}
        name = path_name(keyed)
        paths.setdefault(name, SamplingPath(name, body))
    return list(paths.values())


@dataclass
class WarmupResult:
    """How one replica's warm-up went: seconds per path, and the error that ended it, if any."""

    index: int
    endpoint: str
    seconds: dict[str, float] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "index": self.index,
            "endpoint": self.endpoint,
            "seconds": {k: round(v, 3) for k, v in self.seconds.items()},
        }
        if self.refused:
            out["refused"] = self.refused
        if self.error:
            out["error"] = self.error
        return out


class Warmup:
    """Holds every replica out of the dispatcher until its paths answered, then lets it take work."""

    def __init__(
        self,
        config: WarmupConfig,
        sampling: SamplingConfig,
        transport: TransportConfig,
        dispatcher: Dispatcher,
        http: aiohttp.ClientSession,
        model: str,
    ) -> None:
        self.config = config
        self.transport = transport
        self.dispatcher = dispatcher
        self.http = http
        self.paths = sampling_paths(sampling, model)
        self.results: list[WarmupResult] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._rng = random.Random()

    @classmethod
    def start(
        cls,
        config: WarmupConfig,
        sampling: SamplingConfig,
        transport: TransportConfig,
        dispatcher: Dispatcher,
        http: aiohttp.ClientSession,
        model: str,
    ) -> Warmup | None:
        """Hold every replica and warm each at once (and each replacement that joins later); None when off."""
        if not config.enabled:
            return None
        warmup = cls(config, sampling, transport, dispatcher, http, model)
        names = "; ".join(p.name for p in warmup.paths)
        log.info(
            f"{PHASE}: {len(warmup.paths)} sampling path(s) ({names}) on {len(dispatcher.replicas)} replica(s), "
            "before they take the job's requests"
        )
        for replica in dispatcher.replicas:
            warmup.add(replica)
        dispatcher.on_new_replica = warmup.add
        return warmup

    def add(self, replica: Replica) -> None:
        """Hold `replica` and warm it in the background."""
        self.dispatcher.rotation.hold(replica)
        task = asyncio.create_task(self._warm(replica))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _warm(self, replica: Replica) -> None:
        result = WarmupResult(replica.index, replica.endpoint)
        self.results.append(result)
        t0 = time.monotonic()
        for path in self.paths:
            started = time.monotonic()
            try:
                await self._send(replica, path)
            except Rejected as e:  # the request's fault, not the replica's: the job's requests will meet it too
                result.refused[path.name] = e.message
                log.info(
                    f"replica {replica.index} ({replica.endpoint}) refused the warm-up of path {path.name}: "
                    f"{e.message}; the job's requests of that path will be refused the same way"
                )
            except TransientError as e:
                result.error = f"path {path.name}: {e.message}"
                log.warning(
                    f"replica {replica.index} ({replica.endpoint}) failed its warm-up ({result.error}); "
                    "it takes no work in this run; read its log, then run the same command to resume on it"
                )
                self.dispatcher.rotation.warmup_failed(
                    replica, f"replica {replica.index} failed its warm-up: {result.error}"
                )
                return
            result.seconds[path.name] = time.monotonic() - started
        log.info(
            f"replica {replica.index}: {PHASE}: done in {time.monotonic() - t0:.1f}s "
            f"({', '.join(f'{k} {v:.1f}s' for k, v in result.seconds.items())})"
        )
        self.dispatcher.rotation.admit(replica)

    async def _send(self, replica: Replica, path: SamplingPath) -> None:
        """One warm-up request; connection errors and 5xx are retried with the job's backoff, a timeout is not."""
        t = self.transport
        for attempt in range(t.max_attempts):
            try:
                await chat(self.http, replica.endpoint, path.body, self.config.timeout_s)
                return
            except TransientError as e:
                if e.message.startswith("timed out") or attempt + 1 == t.max_attempts:
                    raise
                await asyncio.sleep(backoff_delay(attempt, t.backoff_base_s, t.backoff_max_s, self._rng))

    async def settled(self) -> None:
        """Wait until every warm-up started so far has answered or failed."""
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def close(self) -> None:
        """Stop what is still warming (the run is over)."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def to_dict(self) -> dict[str, Any]:
        return {"paths": [p.name for p in self.paths], "replicas": [r.to_dict() for r in self.results]}
