"""The job's identity is defined once (generate/config: IDENTITY_FIELDS) and keeps old output directories resumable."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from standin_server import StandinServer

from fleetgen.errors import ResumeMismatchError
from fleetgen.generate import GenerateConfig, generate
from fleetgen.generate.config import IDENTITY_FIELDS

FIXTURE = Path(__file__).resolve().parents[1] / "export" / "fixtures" / "smollm2-run"

# Fields that say how, where or how fast rows are made, never what a row holds: a resume continues across a
# change of any of them. A new field must be put here or in IDENTITY_FIELDS (generate/config/__init__.py).
HOW_FIELDS = {
    "output_dir",
    "fleet_state",
    "endpoints",
    "api_key",  # where: the servers and the directory, not the rows
    "samples",  # how many: more samples add rows, the ones there stay right
    "concurrency",
    "dispatch",
    "prefix_affinity",
    "prefix_routing",
    "hedge",
    "hedge_after_s",  # routing, load
    "max_attempts",
    "backoff_base_s",
    "backoff_max_s",
    "timeout_base_s",
    "timeout_per_token_s",  # transport
    "replica_failures",
    "replica_cooldown_s",
    "give_up_after_s",
    "stop_grace_s",
    "commit_interval_s",
    "stall_factor",
    "stall_floor_s",
    "freeze_factor",  # when a request is re-sent: the answer is the same job's
    "metrics_port",
    "metrics_host",
    "metrics_allow_remote",
    "event_loop",  # watching and running the client
    "replica_slice",
    "shard_runner",
    "lease_wait_s",
    "lease_group",
    "shard_retries",  # placement of shards
    "warmup",
    "warmup_timeout_s",  # before the job's requests
    "retry_errors",
    "force",  # what this run does with the directory, not what a row is
    "context_length",  # a bound for retry-longer that the server's own limit sets anyway
    "token_ids",
    "require_token_ids",  # a row without ids says why, and exports re-tokenize it
}


def test_every_generate_field_is_either_part_of_the_identity_or_said_not_to_be():
    fields = set(GenerateConfig.flat_fields())  # every field of every section, by the name its flag has
    assert not set(IDENTITY_FIELDS) & HOW_FIELDS
    unsorted = fields - set(IDENTITY_FIELDS) - HOW_FIELDS
    assert not unsorted, f"decide whether {sorted(unsorted)} change what a row is (IDENTITY_FIELDS) or not (HOW_FIELDS)"
    assert set(IDENTITY_FIELDS) | HOW_FIELDS == fields


def test_a_directory_written_before_resumes_under_new_transport_and_refuses_new_sampling(tmp_path):
    out = tmp_path / "out"
    shutil.copytree(FIXTURE, out)  # a real run's output, job.json as an earlier fleetgen wrote it
    recorded = (out / "job.json").read_bytes()
    server = StandinServer(model="smollm2")
    url = server.start()
    try:
        base = dict(
            prompts=out / "prompts.jsonl",
            output_dir=out,
            endpoints=[url],
            samples=2,
            max_tokens=96,
            temperature=0.7,
            warmup=False,
            token_ids=False,
        )
        stats = generate(
            GenerateConfig(**base, concurrency=3, max_attempts=2, hedge=False, event_loop="asyncio"),
            handle_signals=False,
        )
        assert stats.resumed == 64 and server.requests == 0, "every row of the earlier run stands"
        assert (out / "job.json").read_bytes() == recorded
        with pytest.raises(ResumeMismatchError, match="temperature was 0.7, now 0.2"):
            generate(GenerateConfig(**{**base, "temperature": 0.2}), handle_signals=False)
    finally:
        server.stop()
