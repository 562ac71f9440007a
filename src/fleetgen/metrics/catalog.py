"""Every metric fleetgen serves, declared once: the collectors
build from it, the docs and dashboard are checked against it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["counter", "gauge", "histogram"]

# Request latency histogram bounds (seconds): generate's counters bin by them, the page shows them.
LATENCY_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 320.0, 640.0)

REPLICA = ("replica", "endpoint")


@dataclass(frozen=True)
class MetricSpec:
    """One metric: its exposed name (counters end in _total), type, help text and label names."""

    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()

    @property
    def family(self) -> str:
        """The name prometheus_client's families take: a counter without its _total suffix."""
        return self.name.removesuffix("_total") if self.kind == "counter" else self.name


def _m(name: str, kind: Kind, help: str, labels: tuple[str, ...] = ()) -> MetricSpec:
    return MetricSpec(name, kind, help, labels)


GENERATE = (
    _m("fleetgen_job_samples", "gauge", "(prompt id, sample) pairs in the job: prompt rows x samples."),
    _m("fleetgen_samples_remaining", "gauge", "Pairs of the job not recorded yet."),
    _m("fleetgen_samples_completed_total", "counter", "Pairs this run wrote to results.jsonl."),
    _m("fleetgen_samples_failed_total", "counter", "Pairs (and bad input rows) this run wrote to errors.jsonl."),
    _m("fleetgen_input_errors_total", "counter", "Bad input rows this run wrote to errors.jsonl."),
    _m("fleetgen_samples_resumed_total", "counter", "Pairs found already recorded by an earlier run, skipped."),
    _m("fleetgen_samples_truncated_total", "counter", "Recorded pairs with a turn cut by max_tokens."),
    _m("fleetgen_duplicates_dropped_total", "counter", "Outcomes dropped because their pair was already recorded."),
    _m(
        "fleetgen_prompt_tokens_total",
        "counter",
        "Prompt tokens of the recorded samples (as the servers counted them).",
    ),
    _m("fleetgen_output_tokens_total", "counter", "Output (completion) tokens of the recorded samples."),
    _m(
        "fleetgen_request_retries_total",
        "counter",
        "Requests sent again after a transient failure (connection, timeout, 429, 5xx).",
    ),
    _m("fleetgen_output_tokens_per_second", "gauge", "Output tokens per second, averaged over this run."),
    _m("fleetgen_samples_per_second", "gauge", "Pairs recorded per second, averaged over this run."),
    _m(
        "fleetgen_eta_seconds",
        "gauge",
        "Seconds until the job is done at this run's average rate (absent before the first pair).",
    ),
    _m("fleetgen_generate_elapsed_seconds", "gauge", "Seconds since this generate run started."),
    _m(
        "fleetgen_replica_requests_total",
        "counter",
        "Requests sent to the replica (hedges and retries included).",
        REPLICA,
    ),
    _m("fleetgen_replica_requests_in_flight", "gauge", "Requests the replica holds now.", REPLICA),
    _m(
        "fleetgen_replica_window",
        "gauge",
        "Requests fleetgen keeps in flight on the replica at most (under --concurrency auto: the limit chosen now).",
        REPLICA,
    ),
    _m(
        "fleetgen_replica_engine_waiting",
        "gauge",
        "Requests the replica's engine reported waiting at the last load poll (--concurrency auto; NaN before one).",
        REPLICA,
    ),
    _m(
        "fleetgen_replica_engine_kv_cache_usage",
        "gauge",
        "KV cache use (0-1) the replica's engine reported at the last load poll (--concurrency auto; NaN before one).",
        REPLICA,
    ),
    _m(
        "fleetgen_replica_engine_preemptions_total",
        "counter",
        "Requests the replica's engine preempted (vLLM) or retracted (SGLang) while the job polled it.",
        REPLICA,
    ),
    _m(
        "fleetgen_replica_failures_total",
        "counter",
        "Transient failures on the replica (each retried elsewhere).",
        REPLICA,
    ),
    _m("fleetgen_replica_rejected_total", "counter", "Requests the replica refused with a 4xx.", REPLICA),
    _m("fleetgen_replica_hedges_total", "counter", "Twins of straggling requests sent to the replica.", REPLICA),
    _m(
        "fleetgen_replica_stalled_total",
        "counter",
        "Requests the replica left unanswered past the bound its pace sets: cancelled and re-sent.",
        REPLICA,
    ),
    _m("fleetgen_replica_ejections_total", "counter", "Times the replica was taken out of rotation.", REPLICA),
    _m(
        "fleetgen_replica_frozen",
        "gauge",
        "1 while the job holds the replica frozen (silent while the others answered): no work until a probe answers.",
        REPLICA,
    ),
    _m(
        "fleetgen_replica_freezes_total",
        "counter",
        "Times the job declared the replica frozen by the fleet's pace (its requests re-sent at once).",
        REPLICA,
    ),
    _m(
        "fleetgen_replica_frozen_resent_total",
        "counter",
        "Requests the replica held when it was declared frozen: cancelled and re-sent to the others.",
        REPLICA,
    ),
    _m(
        "fleetgen_replica_in_rotation",
        "gauge",
        "1 while the replica takes new requests, 0 while it is ejected.",
        REPLICA,
    ),
    _m("fleetgen_replica_output_tokens_total", "counter", "Output tokens the replica answered with.", REPLICA),
    _m(
        "fleetgen_replica_request_duration_seconds",
        "histogram",
        "Seconds from sending a request to its answer, for answered ones (a hedge winner: from the first send).",
        REPLICA,
    ),
)

RUN = (
    _m("fleetgen_run_stage", "gauge", "1 for the stage `fleetgen run` is in, 0 for the others.", ("stage",)),
    _m("fleetgen_replica_restarts_total", "counter", "Replicas the supervisor restarted (dead or hung).", ("replica",)),
)

CAPTURE = (
    _m(
        "fleetgen_capture_records_completed_total",
        "counter",
        "(id, sample) this capture run wrote whole and journaled.",
    ),
    _m("fleetgen_capture_records_resumed_total", "counter", "(id, sample) found captured by an earlier run, skipped."),
    _m(
        "fleetgen_capture_records_failed_total", "counter", "Records this run could not capture (capture_errors.jsonl)."
    ),
    _m(
        "fleetgen_capture_records_from_text_total",
        "counter",
        "Captured records whose ids were re-encoded from text (the row recorded none).",
    ),
    _m("fleetgen_capture_tokens_total", "counter", "Tokens whose hidden states this run captured."),
    _m("fleetgen_capture_bytes_total", "counter", "Bytes of the hidden-state files this run wrote."),
    _m(
        "fleetgen_capture_planned_tokens",
        "gauge",
        "Tokens left to capture when this run started (from generate's usage counts; an upper bound for multi-turn).",
    ),
    _m("fleetgen_capture_tokens_per_second", "gauge", "Tokens captured per second, averaged over this run."),
    _m("fleetgen_capture_elapsed_seconds", "gauge", "Seconds since this capture run started."),
)

ALL = GENERATE + RUN + CAPTURE


def exposed_names(spec: MetricSpec) -> tuple[str, ...]:
    """The sample names a scrape shows for `spec` (a histogram's _bucket, _sum and _count)."""
    if spec.kind == "histogram":
        return (spec.name + "_bucket", spec.name + "_sum", spec.name + "_count")
    return (spec.name,)
