"""The warm-up against a real vLLM-CPU replica (the session's `cpu_fleet`, one of its replicas).

vLLM on CPU compiles no sampling kernel on first use, so this cannot show a stall avoided (the
stand-in does, test_warmup.py); it shows that each path's warm-up request reaches a real server
and is answered, the server counting exactly the job's requests plus one per path.
"""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from helpers import assert_exactly_once, write_prompts

from fleetgen.fleet.engines.base import metric_totals
from fleetgen.generate import GenerateConfig, generate
from fleetgen.generate.dispatch.warmup import sampling_paths

pytestmark = pytest.mark.engine

PROFILES = [
    {"name": "greedy", "temperature": 0.0},
    {"name": "nucleus", "temperature": 0.9, "top_p": 0.9},
    {"name": "floor", "temperature": 0.9, "min_p": 0.1},
    {"name": "topk", "temperature": 0.9, "top_k": 20},
]


def served(endpoint: str) -> float:
    """Requests the server finished, by its own counter (vllm:request_success_total, all reasons)."""

    async def get() -> str:
        async with aiohttp.ClientSession() as s, s.get(endpoint + "/metrics") as r:
            return await r.text()

    return metric_totals(asyncio.run(get())).get("vllm:request_success_total", 0.0)


def test_each_paths_warm_up_reaches_a_real_server_before_the_job(cpu_fleet, tmp_path):
    endpoint = cpu_fleet.endpoints[0]
    write_prompts(tmp_path / "p.jsonl", 4)
    config = GenerateConfig(
        prompts=tmp_path / "p.jsonl",
        output_dir=tmp_path / "out",
        endpoints=[endpoint],
        model=cpu_fleet.served_model_name,
        max_tokens=8,
        profiles=PROFILES,
        hedge=False,
    )
    before = served(endpoint)
    stats = generate(config, handle_signals=False)
    after = served(endpoint)
    assert_exactly_once(tmp_path / "out", [f"p{i}" for i in range(4)], 1)
    paths = sampling_paths(config.sampling, cpu_fleet.served_model_name)
    assert [p.name for p in paths] == ["greedy", "top_p<1", "min_p", "top_k"]
    (warmed,) = stats.warmup["replicas"]
    assert "error" not in warmed and not warmed.get("refused") and list(warmed["seconds"]) == [p.name for p in paths]
    assert after - before == stats.replicas[0].requests + len(paths)  # the job's, and one warm-up per path
