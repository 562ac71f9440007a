"""What fleetgen needs to know about an inference engine, and nothing more."""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

from fleetgen.fleet.engines.memory_share import EqualShare

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric


class Phase(str, Enum):
    """Start-up phases shown while `up` waits; read from each replica's log."""

    STARTING = "starting"
    LOADING = "loading weights"
    COMPILING = "compiling / capturing graphs"
    WARMING = "warming up"
    PROBING = "probing"
    READY = "ready"
    FAILED = "failed"

    @property
    def order(self) -> int:
        return list(Phase).index(self)


@dataclass(frozen=True)
class ReplicaSpec:
    """Everything needed to start one replica; the engine turns it into a command line."""

    index: int
    model: str
    served_model_name: str
    host: str
    port: int
    gpus: tuple[int, ...] = ()
    cpus: tuple[int, ...] = ()
    tp: int = 1
    max_running_requests: int | None = None
    context_length: int | None = None
    enforce_eager: bool = False
    cpu_kv_cache_gb: float = 2.0
    api_key: str | None = None
    tool_call_parser: str | None = None
    prefix_cache: bool | None = None
    extra_args: tuple[str, ...] = ()
    cache_dir: Path | None = None
    # Replicas sharing this replica's GPU group, and this one's place among them (0 starts first).
    gpu_sharers: int = 1
    gpu_slot: int = 0
    # A later replica of a shared GPU: the first one's memory, measured (memory_share.EqualShare); None: not measured.
    share: EqualShare | None = None

    @property
    def on_gpu(self) -> bool:
        return bool(self.gpus)


class LazyRegex:
    """A regex compiled at its first search: compiling the engines' log patterns at import cost `generate`,
    `status` and `down` time without reading a single log line (BENCHMARKS.md, issue 26)."""

    __slots__ = ("pattern", "_compiled")

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self._compiled: re.Pattern[str] | None = None

    def search(self, text: str) -> re.Match[str] | None:
        if self._compiled is None:
            self._compiled = re.compile(self.pattern)
        return self._compiled.search(text)


@dataclass(frozen=True)
class FatalPattern:
    """A log line that means the replica will never become ready, and what to do about it."""

    regex: LazyRegex
    hint: str


@dataclass
class Metrics:
    """The load a server reports; None where the engine does not report it."""

    running: float | None = None
    waiting: float | None = None
    generation_tokens_total: float | None = None
    kv_cache_usage: float | None = None
    # Requests preempted so far (a counter: vLLM), and retracted at the last report (a gauge: SGLang).
    preemptions_total: float | None = None
    retracted: float | None = None
    # Seconds the engine has spent evicting its prefix cache so far (a counter: SGLang's eviction histogram sum).
    eviction_seconds_total: float | None = None
    extra: dict[str, float] = field(default_factory=dict)


class Engine(ABC):
    """Builds command lines, reads logs and metrics. Knows nothing about fleets or dispatch."""

    name: str
    health_path: str = "/health"
    metrics_path: str = "/metrics"
    # An older name to try when a config endpoint is missing (e.g. SGLang's /get_server_info).
    endpoint_fallbacks: dict[str, str] = {}
    phase_patterns: tuple[tuple[LazyRegex, Phase], ...] = ()
    fatal_patterns: tuple[FatalPattern, ...] = ()
    # The engine's flag for a replica's share of GPU memory (checked where replicas share a GPU: sharing.py).
    memory_flag: str | None = None
    # Whether that share is of the memory FREE at the replica's start (SGLang) rather than of the whole GPU
    # (vLLM); then the later replicas of a GPU are given the first one's measured bytes (memory_share.EqualShare),
    # and this reported field names its KV pool in tokens.
    share_of_free_memory: bool = False
    kv_pool_field: str | None = None
    # Start-up steps whose seconds the engine logs (group 1), shown when the replica is ready.
    timing_patterns: tuple[tuple[LazyRegex, str], ...] = ()

    @abstractmethod
    def command(self, spec: ReplicaSpec, python: str) -> list[str]:
        """The argv that starts the server for `spec`."""

    def environment(self, spec: ReplicaSpec) -> dict[str, str]:
        """Environment variables added for this replica (device pinning, caches)."""
        env: dict[str, str] = {}
        if spec.on_gpu:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in spec.gpus)
        return env

    def phase_of(self, line: str) -> Phase | None:
        for regex, phase in self.phase_patterns:
            if regex.search(line):
                return phase
        return None

    def timing_of(self, line: str) -> tuple[str, float] | None:
        """(step, seconds) when `line` is the engine's report of a timed start-up step."""
        for regex, label in self.timing_patterns:
            m = regex.search(line)
            if m:
                return label, float(m.group(1))
        return None

    def fatal_of(self, line: str) -> FatalPattern | None:
        for pattern in self.fatal_patterns:
            if pattern.regex.search(line):
                return pattern
        return None

    # An optional check: an engine without one accepts every command line (not abstract on purpose).
    def validate_commands(self, argvs: list[list[str]], python: str) -> None:  # noqa: B027
        """Raise EngineError for a command line the engine would reject, before anything starts."""

    @abstractmethod
    def parse_metrics(self, text: str) -> Metrics:
        """Read the engine's Prometheus text into the load fields fleetgen uses."""

    # The samples parse_metrics reads for load: a poll parses only their lines (see parse_load).
    load_metrics: frozenset[str] = frozenset()

    def parse_load(self, text: str) -> Metrics:
        """parse_metrics over the load lines alone: a page is mostly histograms, most of its parse (BENCHMARKS.md,
        "figures the code cites")."""
        if not self.load_metrics:
            return self.parse_metrics(text)
        names, starts = self.load_metrics, tuple(self.load_metrics)
        keep = [
            line
            for line in text.splitlines()
            if line.startswith(starts) and line.split("{", 1)[0].split(" ", 1)[0] in names
        ]
        return self.parse_metrics("\n".join(keep) + "\n")

    @abstractmethod
    def config_endpoints(self) -> tuple[str, ...]:
        """GET endpoints whose JSON describes the server's effective configuration."""

    @abstractmethod
    def effective_config(self, answers: dict[str, object]) -> dict[str, object]:
        """Flatten the answers of `config_endpoints` into fields compared across replicas."""


def flag_value(args: list[str] | tuple[str, ...], flag: str) -> str | None:
    """The last value given for `flag` (`--f v` or `--f=v`) in `args`, else None."""
    value = None
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            value = args[i + 1]
        elif a.startswith(flag + "="):
            value = a.split("=", 1)[1]
    return value


def without_flag(args: list[str] | tuple[str, ...], flag: str) -> list[str]:
    """`args` with every `--f v` / `--f=v` of `flag` removed."""
    out: list[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
        elif a == flag:
            skip = True
        elif not a.startswith(flag + "="):
            out.append(a)
    return out


def metric_totals(text: str) -> dict[str, float]:
    """Each sample name summed over its label sets (e.g. one gauge per engine core), read by prometheus_client."""
    totals: dict[str, float] = {}
    for family in _families(text):
        for sample in family.samples:
            totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
    return totals


def metric_labels(text: str, metric: str) -> dict[str, str]:
    """The labels of the first sample of `metric` (info-style gauges carry config in labels)."""
    for family in _families(text):
        for sample in family.samples:
            if sample.name == metric:
                return dict(sample.labels)
    return {}


def _families(text: str) -> Iterator[Metric]:
    """The metric families of a /metrics page; a malformed line ends the page there, keeping what came before."""
    # Imported here: prometheus_client loads its HTTP server modules too, which no CLI start should pay (BENCHMARKS.md).
    from prometheus_client.parser import text_string_to_metric_families

    try:
        yield from text_string_to_metric_families(text)
    except ValueError:
        return
