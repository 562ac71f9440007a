"""The most requests worth holding on an SGLang replica under `--concurrency auto`: its CUDA-graph batch size.

SGLang admits every request its KV pool holds (it reports no queue until the pool is full), so the
auto limit grows to its ceiling (1,024) there. But SGLang decodes a batch larger than its
`cuda_graph_max_bs` (256 on an H100 or H200 at TP 1, chosen by the server from the GPU's memory)
without CUDA graphs, each step launched from Python, and a plain client's own sweep on an H100 ran
slower at 512 and 1,024 in flight than at 256 on both models measured (BENCHMARKS.md, "the chat path
at parity"). The server states the size in /server_info, so a replica's limit stops there; a job that
wants larger batches raises the server's `--cuda-graph-max-bs`, and the limit follows.
"""

from __future__ import annotations

import aiohttp
import orjson

_TIMEOUT = aiohttp.ClientTimeout(total=10)
SERVER_INFO_PATHS = ("/server_info", "/get_server_info")  # SGLang >= 0.5.6, and the older name


def graph_batch_size(info: object) -> int | None:
    """The requests an SGLang server decodes with CUDA graphs at once (each of its `dp_size` schedulers has its
    own graphs); None where it runs without them or does not say."""
    if not isinstance(info, dict) or info.get("disable_cuda_graph"):
        return None
    size, dp = info.get("cuda_graph_max_bs"), info.get("dp_size")
    if not _positive(size):
        return None
    return size * dp if _positive(dp) else size


def _positive(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


async def read_graph_batch_size(http: aiohttp.ClientSession, endpoint: str) -> int | None:
    """graph_batch_size of the server at `endpoint`, from its /server_info; None where it does not say."""
    for path in SERVER_INFO_PATHS:
        try:
            async with http.get(endpoint + path, timeout=_TIMEOUT) as r:
                if r.status != 200:
                    continue
                return graph_batch_size(orjson.loads(await r.read()))
        except (aiohttp.ClientError, OSError, TimeoutError, orjson.JSONDecodeError):
            continue
    return None
