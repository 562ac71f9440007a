"""The native path's two skipped round trips give what the server would have answered.

- THINK_FREE: SGLang 0.5.12's own ReasoningParser (run in .venv-sglang, as native_standin.py loads it) splits a
  text without the opening tag into no reasoning and the text as is, for every parser fleetgen skips it for.
- RenderCache: concurrent askers of one rendering share one /v1/tokenize, against the stand-in with SGLang's
  captures (native_standin.py), and get the ids a lone request gets; a failed request is not kept.
"""

from __future__ import annotations

import asyncio
import json
import subprocess

import aiohttp
import pytest
from test_native_path import HERE, _log, fixture, run, standin  # noqa: F401  (the module's stand-in fixture)

from fleetgen.errors import FleetgenError
from fleetgen.fleet.engines.sglang_validate import sglang_python
from fleetgen.generate.turns.native import THINK_FREE, NativeServer, RenderCache, render, split_reasoning

TEXTS = [
    "The answer is 42.",
    "",
    "  leading and trailing spaces  \n",
    "An answer that mentions </think> without opening it.",
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    "Unicode: \u00e9\u00e8 \u4e2d\u6587 \U0001f600 <|im_end|>",
    "think> almost a tag, <thin k>",
]

PARSE = """
import json, sys
sys.path.insert(0, sys.argv[1])
from native_standin import load_sglang_parsers
_, _, ReasoningParser = load_sglang_parsers()
texts, parsers = json.loads(sys.argv[2]), json.loads(sys.argv[3])
print(json.dumps({p: [list(ReasoningParser(model_type=p).parse_non_stream(t)) for t in texts] for p in parsers}))
"""


def test_sglangs_own_parser_leaves_a_text_without_the_opening_tag_whole_for_every_skipped_parser():
    out = subprocess.run(
        [str(sglang_python()), "-c", PARSE, str(HERE), json.dumps(TEXTS), json.dumps(sorted(THINK_FREE))],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    served = json.loads(out.stdout.strip().splitlines()[-1])
    for parser in sorted(THINK_FREE):
        server = NativeServer(reasoning_parser=parser, tool_call_parser=None)
        for text, (reasoning, rest) in zip(TEXTS, served[parser]):
            # What the HTTP route answers, as split_reasoning reads it: reasoning_text or None, text or "".
            assert (reasoning or None, rest or "") == (None, text), (parser, text)
            # And the skip asks nothing: no session to ask with.
            assert run(split_reasoning(None, "http://unused", server, text, False, 1.0)) == (None, text)


def test_a_text_with_the_opening_tag_or_a_forced_turn_still_goes_to_the_server():
    server = NativeServer(reasoning_parser="qwen3", tool_call_parser=None)
    with pytest.raises(AttributeError):  # it tried to post with the (absent) session
        run(split_reasoning(None, "http://unused", server, "<think>hm</think>yes", False, 1.0))
    with pytest.raises(AttributeError):
        run(split_reasoning(None, "http://unused", server, "yes", True, 1.0))
    other = NativeServer(reasoning_parser="deepseek-r1", tool_call_parser=None)  # forces reasoning by default
    with pytest.raises(AttributeError):
        run(split_reasoning(None, "http://unused", other, "yes", False, 1.0))


def test_concurrent_renders_of_one_body_share_one_tokenize_and_get_the_lone_requests_ids(standin):  # noqa: F811
    cap = fixture("tokenize_plain")
    body = {**cap["request"], "max_tokens": 8}
    cache = RenderCache(16)

    async def go():
        async with aiohttp.ClientSession() as http:
            before = sum(1 for e in await _log(standin) if e["path"] == "/v1/tokenize")
            shared = await asyncio.gather(*(render(http, standin, body, 30, cache) for _ in range(5)))
            again = await render(http, standin, body, 30, cache)
            alone = await render(http, standin, body, 30)  # no cache: a request of its own
            after = sum(1 for e in await _log(standin) if e["path"] == "/v1/tokenize")
            return shared, again, alone, after - before

    shared, again, alone, sent = run(go())
    assert sent == 2  # one for the five sharers and the later asker, one for the request without a cache
    assert all(ids == cap["response"]["tokens"] for ids in shared) and again == alone == cap["response"]["tokens"]
    assert (cache.misses, cache.hits) == (1, 5)


def test_a_failed_render_is_not_kept_and_its_sharers_ask_again():
    cache = RenderCache(2)
    calls = []

    async def fetch():
        calls.append(1)
        await asyncio.sleep(0)
        if len(calls) == 1:
            raise FleetgenError("connection reset")
        return [1, 2, 3]

    async def go():
        results = await asyncio.gather(*(cache.get("e", {"m": 1}, fetch) for _ in range(3)), return_exceptions=True)
        return results, await cache.get("e", {"m": 1}, fetch)

    results, later = run(go())
    assert isinstance(results[0], FleetgenError)  # the sender's own failure
    assert results[1:] == [[1, 2, 3], [1, 2, 3]] and later == [1, 2, 3]
    assert len(calls) == 2  # the failure, then one request for both sharers; the later asker hit the cache


def test_the_cache_keeps_at_most_its_size():
    cache = RenderCache(2)

    async def fetch_for(n):
        async def fetch():
            return [n]

        return await cache.get("e", {"n": n}, fetch)

    async def go():
        for n in (1, 2, 3, 1):
            await fetch_for(n)

    run(go())
    assert cache.misses == 4 and cache.hits == 0  # 1 was evicted by 3, so it was asked again
