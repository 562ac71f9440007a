"""Collectors that read the run's own counters at scrape time, so a request pays nothing for being watched."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from fleetgen.metrics.catalog import CAPTURE, GENERATE, LATENCY_BUCKETS_S, RUN, MetricSpec

_SPECS = {s.name: s for s in GENERATE + RUN + CAPTURE}
_FAMILY = {"counter": CounterMetricFamily, "gauge": GaugeMetricFamily, "histogram": HistogramMetricFamily}
_LE = tuple(repr(b) for b in LATENCY_BUCKETS_S) + ("+Inf",)

STAGES = ("doctor", "mix", "fleet", "generate", "export", "capture", "report", "done")


def _family(name: str) -> Metric:
    spec: MetricSpec = _SPECS[name]
    return _FAMILY[spec.kind](spec.family, spec.help, labels=spec.labels or None)


def _one(name: str, value: float) -> Metric:
    f = _family(name)
    f.add_metric([], value)
    return f


def safe_endpoint(url: str) -> str:
    """The endpoint as a label: credentials, query and fragment removed (a URL may carry a key)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


class GenerateCollector(Collector):
    """fleetgen_* metrics of one generate run, read from its Stats (plain ints the event loop advances).

    The stats are taken as they come (fleetgen.generate.observe.stats.Stats, read by attribute): generate
    starts this page, so metrics must not import generate back.
    """

    def __init__(self, stats: Any) -> None:
        self.stats = stats

    def describe(self) -> list[Metric]:
        return []  # names are fixed by the catalog; the registry need not collect to learn them

    def collect(self) -> Iterator[Metric]:
        s = self.stats
        yield _one("fleetgen_job_samples", s.total)
        yield _one("fleetgen_samples_remaining", s.remaining)
        yield _one("fleetgen_samples_completed_total", s.ok)
        yield _one("fleetgen_samples_failed_total", s.errors)
        yield _one("fleetgen_input_errors_total", s.input_errors)
        yield _one("fleetgen_samples_resumed_total", s.resumed)
        yield _one("fleetgen_samples_truncated_total", s.truncated)
        yield _one("fleetgen_duplicates_dropped_total", s.duplicates_dropped)
        yield _one("fleetgen_prompt_tokens_total", s.prompt_tokens)
        yield _one("fleetgen_output_tokens_total", s.completion_tokens)
        yield _one("fleetgen_request_retries_total", s.retries)
        yield _one("fleetgen_output_tokens_per_second", s.output_tokens_per_s)
        yield _one("fleetgen_samples_per_second", s.samples_per_s)
        eta = s.eta_s
        eta_family = _family("fleetgen_eta_seconds")
        if eta is not None:
            eta_family.add_metric([], eta)
        yield eta_family
        yield _one("fleetgen_generate_elapsed_seconds", s.elapsed_s)
        yield from self._replicas(list(s.replicas))  # a copy: a replacement may be appended meanwhile

    def _replicas(self, replicas: list[Any]) -> Iterator[Metric]:
        values: dict[str, Callable[[Any], float | None]] = {
            "fleetgen_replica_requests_total": lambda r: r.requests,
            "fleetgen_replica_requests_in_flight": lambda r: r.outstanding,
            "fleetgen_replica_window": lambda r: r.window,
            "fleetgen_replica_engine_waiting": lambda r: r.engine_waiting,
            "fleetgen_replica_engine_kv_cache_usage": lambda r: r.engine_kv_usage,
            "fleetgen_replica_engine_preemptions_total": lambda r: r.engine_preemptions,
            "fleetgen_replica_failures_total": lambda r: r.failures,
            "fleetgen_replica_rejected_total": lambda r: r.rejected,
            "fleetgen_replica_hedges_total": lambda r: r.hedges,
            "fleetgen_replica_stalled_total": lambda r: r.stalled,
            "fleetgen_replica_ejections_total": lambda r: r.ejections,
            "fleetgen_replica_frozen": lambda r: 1.0 if r.frozen else 0.0,
            "fleetgen_replica_freezes_total": lambda r: r.freeze_count,
            "fleetgen_replica_frozen_resent_total": lambda r: r.resent,
            "fleetgen_replica_in_rotation": lambda r: 1.0 if r.in_rotation else 0.0,
            "fleetgen_replica_output_tokens_total": lambda r: r.completion_tokens,
        }
        labels = [[str(r.index), safe_endpoint(r.endpoint)] for r in replicas]
        for name, value in values.items():
            f = _family(name)
            for r, lv in zip(replicas, labels):
                v = value(r)
                f.add_metric(lv, float("nan") if v is None else v)  # an engine gauge never polled: NaN
            yield f
        hist = _family("fleetgen_replica_request_duration_seconds")
        for r, lv in zip(replicas, labels):
            counts, total = list(r.latency.counts), r.latency.sum_s
            cumulative, buckets = 0, []
            for le, c in zip(_LE, counts):
                cumulative += c
                buckets.append((le, cumulative))
            hist.add_metric(lv, buckets, sum_value=total)
        yield hist


class RunCollector(Collector):
    """The stage `fleetgen run` is in, and the supervisor's restarts per replica."""

    def __init__(self) -> None:
        self.stage: str | None = None
        self.restarts: Callable[[], Mapping[int, int]] | None = None

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        if self.stage is not None:  # a plain `generate` is in no pipeline stage: it shows none
            stage = _family("fleetgen_run_stage")
            for name in STAGES:
                stage.add_metric([name], 1.0 if name == self.stage else 0.0)
            yield stage
        if self.restarts is not None:
            restarts = _family("fleetgen_replica_restarts_total")
            for index, n in sorted(self.restarts().items()):
                restarts.add_metric([str(index)], n)
            yield restarts


class CaptureCollector(Collector):
    """fleetgen_capture_* metrics of one capture run, read from its summary (plain ints the runner advances).

    The summary is taken as it comes (fleetgen.capture.run.CaptureSummary, read by attribute), so metrics
    imports nothing of capture.
    """

    def __init__(self, summary: Any, clock: Callable[[], float] = time.monotonic) -> None:
        self.summary = summary
        self.clock = clock
        self.started = clock()

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        s = self.summary
        elapsed = self.clock() - self.started
        yield _one("fleetgen_capture_records_completed_total", s.captured)
        yield _one("fleetgen_capture_records_resumed_total", s.already)
        yield _one("fleetgen_capture_records_failed_total", s.failed)
        yield _one("fleetgen_capture_records_from_text_total", s.from_text)
        yield _one("fleetgen_capture_tokens_total", s.tokens)
        yield _one("fleetgen_capture_bytes_total", s.bytes)
        yield _one("fleetgen_capture_planned_tokens", s.planned_tokens)
        yield _one("fleetgen_capture_tokens_per_second", s.tokens / elapsed if elapsed > 0 else 0.0)
        yield _one("fleetgen_capture_elapsed_seconds", elapsed)
