"""Run counters the library advances and any display reads; the summary written to stats.json."""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fleetgen.metrics.catalog import LATENCY_BUCKETS_S
from fleetgen.rows.token_ids import MISSING

Clock = Callable[[], float]


# Upper bounds (seconds) of the request-latency buckets: a 16-token test answer to a 40 s reasoning turn.


@dataclass
class LatencyHistogram:
    """Request latencies in fixed buckets; observed on the event loop (no lock), read at scrape time."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS_S) + 1))  # last: +Inf
    sum_s: float = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(LATENCY_BUCKETS_S, seconds)] += 1
        self.sum_s += seconds


@dataclass(slots=True)
class ReplicaStats:
    """One replica's load and work; the dispatcher owns and advances it.

    Slots: the dispatcher reads these per request and per replica, and an instance of 30 attributes or more
    without them falls off CPython 3.11's fast path for attribute reads (its dict no longer shares keys).
    """

    index: int
    endpoint: str
    window: int
    outstanding: int = 0
    requests: int = 0
    ok: int = 0
    failures: int = 0
    rejected: int = 0
    hedges: int = 0
    stalled: int = 0  # requests cancelled and re-sent after no answer within the bound its pace sets (stall.py)
    completion_tokens: int = 0
    prompt_tokens: int = 0
    in_rotation: bool = True
    ejections: int = 0
    warming: bool = False  # held out of rotation while its sampling paths compile (warmup.py)
    warmup_error: str | None = None  # why its warm-up failed: it took no work this run
    latency: LatencyHistogram = field(default_factory=LatencyHistogram)
    # Requests whose answer came from a twin on another replica while this one's was still running.
    moved: int = 0
    # A replica that hangs (SIGSTOP, a wedged engine) fails nothing: its requests just get no answer,
    # and hedging re-sends them. What tells it apart: requests it got that ended unanswered since its
    # last answer (`silent`, of them `silent_moved` answered elsewhere), and how long that has been.
    first_request_at: float | None = None  # clock time of its first request
    last_answer_at: float | None = None  # clock time of its last answer (a 4xx is an answer too)
    silent: int = 0
    silent_moved: int = 0
    stall_after_s: float = 10.0  # silence this long, with requests unanswered, is "stopped answering"
    # Declared frozen by the fleet's pace (freeze.py): out of rotation now, times so far, requests re-sent from
    # it, and its last few freezes ({"at", "silent_s", "bound_s", "resent", "rejoined_at"}, clock times).
    frozen: bool = False
    freeze_count: int = 0
    resent: int = 0
    freezes: list[dict[str, Any]] = field(default_factory=list)

    # The window's range over the run (it moves under --concurrency auto), and what the engine reported last.
    window_min: int = 0
    window_max: int = 0
    engine_running: float | None = None
    engine_waiting: float | None = None
    engine_kv_usage: float | None = None
    engine_preemptions: int = 0  # seen by the load poller during this run
    engine_eviction_s: float = 0.0  # seconds the engine spent evicting its prefix cache, seen by the poller

    def __post_init__(self) -> None:
        self.window_min = self.window_max = self.window

    def answered(self, now: float) -> None:
        self.last_answer_at = now
        self.silent = self.silent_moved = 0

    def stopped_answering_since(self, now: float) -> float | None:
        """Clock time of its last answer (or first request) when it has since left requests unanswered
        for at least `stall_after_s`; None while it answers."""
        since = self.last_answer_at if self.last_answer_at is not None else self.first_request_at
        if since is None or not (self.silent or self.outstanding) or now - since < self.stall_after_s:
            return None
        return since


@dataclass
class Stats:
    """Counters of one run. `total` counts (id, sample) pairs in the prompt file (an estimate while reading)."""

    clock: Clock = time.monotonic
    total: int = 0
    resumed: int = 0
    ok: int = 0
    errors: int = 0
    input_errors: int = 0
    truncated: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    duplicates_dropped: int = 0
    retries: int = 0
    turns_with_ids: int = 0
    turns_without_ids: int = 0
    ids_missing: dict[str, int] = field(default_factory=dict)  # turns without ids, by why (token_ids.MISSING codes)
    notes: list[str] = field(default_factory=list)  # what the run changed on the way (a server refused a field)
    started: float = field(default=0.0)
    finished: float | None = None
    interrupted: bool = False
    stopped_reason: str | None = None
    replicas: list[ReplicaStats] = field(default_factory=list)
    tool_cuts: dict[str, int] = field(default_factory=dict)  # samples ended at the target's turn, by reason
    tool_results_kept: int = 0
    tool_results_dropped: int = 0  # recorded results of calls the target did not make, outside cuts
    warmup: dict[str, Any] | None = None  # the sampling paths warmed and each replica's seconds (warmup.py)
    # Times every replica holding requests was silent at once (freeze.py): {"at", "replicas", "ended_at"}, clock times.
    fleet_silences: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.started = self.clock()

    def count_tool_turns(self, record: dict[str, Any]) -> None:
        """Advance the tool-turn counters from one result record (see generate/turns/tool_turns.py)."""
        cut = record.get("cut")
        if cut:
            self.tool_cuts[cut["reason"]] = self.tool_cuts.get(cut["reason"], 0) + 1
        self.tool_results_kept += sum(1 for m in record.get("messages") or () if m.get("role") == "tool")
        self.tool_results_dropped += len(record.get("dropped_tool_results") or ())

    @property
    def done(self) -> int:
        """Pairs recorded, this run and before it."""
        return self.resumed + self.ok + self.errors

    @property
    def elapsed_s(self) -> float:
        return (self.finished if self.finished is not None else self.clock()) - self.started

    @property
    def output_tokens_per_s(self) -> float:
        e = self.elapsed_s
        return self.completion_tokens / e if e > 0 else 0.0

    @property
    def remaining(self) -> int:
        """Pairs of the job not recorded yet."""
        return max(0, self.total - self.done)

    @property
    def samples_per_s(self) -> float:
        """Pairs recorded per second by this run (resumed ones cost nothing and are not counted)."""
        e = self.elapsed_s
        return (self.ok + self.errors) / e if e > 0 else 0.0

    @property
    def eta_s(self) -> float | None:
        """Seconds until the job is done at this run's average rate; None before the first pair."""
        rate = self.samples_per_s
        return self.remaining / rate if rate > 0 else None

    def stopped_answering(self, r: ReplicaStats) -> dict[str, Any] | None:
        """What stats.json and the summary say of a replica that stopped answering: since when, what moved."""
        now = self.finished if self.finished is not None else self.clock()
        since = r.stopped_answering_since(now)
        if since is None:
            return None
        return {
            "since_s": round(since - self.started, 1),
            "silent_for_s": round(now - since, 1),
            "unanswered": r.silent,
            "moved": r.silent_moved,
            "in_flight": r.outstanding,
        }

    def run_time(self, t: float | None) -> float | None:
        """A clock time as seconds into the run (stats.json's times), None kept."""
        return None if t is None else round(t - self.started, 1)

    def frozen(self, r: ReplicaStats) -> dict[str, Any]:
        """What stats.json says of a replica's freezes (freeze.py): now, how often, what moved, when."""
        return {
            "now": r.frozen,
            "count": r.freeze_count,
            "resent": r.resent,
            "episodes": [
                {
                    "at_s": self.run_time(f["at"]),
                    "silent_s": f["silent_s"],
                    "bound_s": f["bound_s"],
                    "resent": f["resent"],
                    "rejoined_at_s": self.run_time(f.get("rejoined_at")),
                }
                for f in r.freezes
            ],
        }

    def to_dict(self) -> dict[str, Any]:
        e = self.elapsed_s
        return {
            "rows": {
                "total": self.total,
                "resumed": self.resumed,
                "ok": self.ok,
                "errors": self.errors,
                "input_errors": self.input_errors,
                "truncated": self.truncated,
            },
            "tool_turns": {
                "cut": sum(self.tool_cuts.values()),
                "cut_by_reason": dict(sorted(self.tool_cuts.items())),
                "results_kept": self.tool_results_kept,
                "results_dropped": self.tool_results_dropped,
            },
            "tokens": {"prompt": self.prompt_tokens, "completion": self.completion_tokens},
            "retries": self.retries,
            # Regenerated turns of this run's results with and without the server's token ids.
            "token_ids": {
                "turns_with": self.turns_with_ids,
                "turns_without": self.turns_without_ids,
                # none: the answer held no ids; mismatch: their count disagreed with usage; refused: not asked.
                "without_by_reason": {k: self.ids_missing.get(k, 0) for k in MISSING if k},
            },
            "notes": list(self.notes),
            "wall_s": round(e, 3),
            "output_tokens_per_s": round(self.output_tokens_per_s, 2),
            "interrupted": self.interrupted,
            "stopped_reason": self.stopped_reason,
            **({"warmup": self.warmup} if self.warmup is not None else {}),
            "fleet_silences": [
                {"at_s": self.run_time(f["at"]), "replicas": f["replicas"], "ended_at_s": self.run_time(f["ended_at"])}
                for f in self.fleet_silences
            ],
            "replicas": [
                {
                    "index": r.index,
                    "endpoint": r.endpoint,
                    "window": r.window,
                    "window_range": [r.window_min, r.window_max],
                    "engine_preemptions": r.engine_preemptions,
                    "engine_eviction_s": round(r.engine_eviction_s, 3),
                    "requests": r.requests,
                    "ok": r.ok,
                    "failures": r.failures,
                    "rejected": r.rejected,
                    "hedges": r.hedges,
                    "stalled": r.stalled,
                    "completion_tokens": r.completion_tokens,
                    "output_tokens_per_s": round(r.completion_tokens / e, 2) if e > 0 else 0.0,
                    "ejections": r.ejections,
                    **({"warmup_error": r.warmup_error} if r.warmup_error else {}),
                    "moved": r.moved,
                    "stopped_answering": self.stopped_answering(r),
                    "frozen": self.frozen(r),
                }
                for r in self.replicas
            ],
        }
