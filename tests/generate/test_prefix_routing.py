"""Routing across prompts by shared leading text: the prefix's home wins within a margin, balance beyond it."""

from __future__ import annotations

import asyncio
import random

from fleetgen.generate.config.sections import RoutingConfig
from fleetgen.generate.dispatch.dispatcher import Dispatcher
from fleetgen.generate.dispatch.prefix_map import BLOCK_CHARS, MIN_BLOCKS, PrefixMap, prefix_blocks

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": f"tool_{i}",
            "description": "does a thing " * 20,
            "parameters": {"type": "object", "properties": {"x": {"type": "string"}}},
        },
    }
    for i in range(6)
]
SYSTEM_A = "You are a function-calling assistant. " * 40
SYSTEM_B = "You are a careful agent working in a shell. " * 40


def prompt(system: str, i: int, tools=TOOLS) -> tuple[list[dict], list[dict] | None]:
    question = f"question number {i}: " + " ".join(f"w{i * 7 + k}" for k in range(80))  # its own blocks too
    return [{"role": "system", "content": system}, {"role": "user", "content": question}], tools


def blocks(system: str, i: int, tools=TOOLS) -> tuple[int, ...]:
    return prefix_blocks(*prompt(system, i, tools))


def make(n=2, window=16, **kw) -> Dispatcher:
    return Dispatcher(
        [f"http://r{i}" for i in range(n)], window, RoutingConfig(hedge=False, **kw), rng=random.Random(0)
    )


def test_prompts_sharing_a_system_prompt_share_their_leading_blocks_and_no_more():
    a1, a2, b1 = blocks(SYSTEM_A, 1), blocks(SYSTEM_A, 2), blocks(SYSTEM_B, 1)
    shared = sum(1 for x, y in zip(a1, a2) if x == y)
    assert shared >= (len(SYSTEM_A) + 1000) // BLOCK_CHARS  # the system prompt and the tools' JSON
    assert a1[:shared] == a2[:shared] and a1 != a2
    assert not set(a1) & set(b1)  # another system prompt: nothing in common
    assert blocks(SYSTEM_A, 1, tools=None)[:3] == a1[:3]  # the system text leads; the tools come after it
    assert blocks(SYSTEM_A, 1, tools=None)[len(SYSTEM_A) // BLOCK_CHARS + 1 :] != a1[len(SYSTEM_A) // BLOCK_CHARS + 1 :]
    assert prefix_blocks([{"role": "user", "content": "hi"}]) == ()  # shorter than a block: no prefix to route by


def test_the_map_finds_the_longest_known_prefix_and_stays_bounded():
    m: PrefixMap[str] = PrefixMap(max_entries=40)
    a = blocks(SYSTEM_A, 1)
    m.record(a[:5], "r0", take_over=True)
    m.record(a[:9], "r1", take_over=False)  # blocks 0-4 stay r0's; 5-8 are r1's
    assert m.longest(a) == ("r1", 9)
    assert m.longest(a[:5]) == ("r0", 5)
    assert m.longest(a[: MIN_BLOCKS - 1]) is None  # too short to be worth a detour
    for i in range(50):
        m.record(blocks(SYSTEM_B, i)[-1:], "r2", take_over=True)  # each question's own last block
    assert len(m) == 40
    assert m.longest(a) is None  # the oldest entries went first


async def test_a_new_prompt_goes_to_the_replica_holding_its_system_prompt():
    d = make()
    first = await d.acquire("a1", blocks(SYSTEM_A, 1))
    other = d.replicas[1 - first.index]
    assert (await d.acquire("b1", blocks(SYSTEM_B, 1))) is other  # least loaded: the other replica
    # another prompt with B's system prompt: B's home, where plain least outstanding takes the lowest
    # index among equals (1 request each), i.e. the first replica
    assert (await d.acquire("b2", blocks(SYSTEM_B, 2))) is other
    assert (await d.acquire("a2", blocks(SYSTEM_A, 2))) is first  # (1 vs 2: also the least loaded)
    assert (await d.acquire("a3", blocks(SYSTEM_A, 3))) is first  # 2 vs 2: A's home again
    # with prefix routing off, the same choice is plain least outstanding (lowest index among equals)
    plain = make(prefix_routing=False)
    r0 = await plain.acquire("a1", blocks(SYSTEM_A, 1))
    assert (await plain.run("a2", _echo, lambda: blocks(SYSTEM_A, 2)))[1] is not r0


async def _echo(r):
    return r.index


async def test_the_home_yields_to_balance_beyond_the_margin():
    d = make(window=16)  # margin: max(2, 16 // 8) = 2 requests
    got = [(await d.acquire(f"a{i}", blocks(SYSTEM_A, i))).index for i in range(8)]
    home = got[0]
    # home while it holds at most 2 more than the other (a3, a5, a7 spill over); a spill does not move the
    # home: a4 and a6 go back to it as soon as the other caught up
    assert got == [home, home, home, 1 - home, home, 1 - home, home, 1 - home]


async def test_a_full_home_is_waited_for_within_the_margin_and_the_waiters_are_counted():
    d = make(window=4)  # margin 2
    home = await d.acquire("a0", blocks(SYSTEM_A, 0))
    other = d.replicas[1 - home.index]
    home.stats.outstanding, other.stats.outstanding = 4, 2  # home full, the other 2 behind: within the margin
    waiter = asyncio.ensure_future(d.acquire("a1", blocks(SYSTEM_A, 1)))
    await asyncio.sleep(0)
    assert not waiter.done() and d.home_waiters == 1  # the runner sends one more request meanwhile
    d.release(home, ok=True)
    assert (await waiter) is home and d.home_waiters == 0
    # a home this full with the other idle is not waited for: a1's sibling goes to the other replica
    other.stats.outstanding = 1
    assert (await asyncio.wait_for(d.acquire("a2", blocks(SYSTEM_A, 2)), 1)) is other


async def test_a_full_home_is_not_waited_for_beyond_the_margin():
    d = make(window=4)
    home = await d.acquire("a0", blocks(SYSTEM_A, 0))
    for _ in range(3):
        home.stats.outstanding += 1  # the home is full with other work; the other replica is idle
    r = await asyncio.wait_for(d.acquire("a1", blocks(SYSTEM_A, 1)), 1)
    assert r is not home and d.home_waiters == 0


async def test_a_replaced_home_loses_its_prefixes_to_where_they_go_next():
    d = make()
    home = await d.acquire("a0", blocks(SYSTEM_A, 0))
    d.release(home, ok=True)
    d.replace_endpoint(home.index, "http://elsewhere")  # the old address's Replica is no one's home now
    r = await d.acquire("a1", blocks(SYSTEM_A, 1))  # least loaded (the new address is a new replica)
    # A's prefix now lives where a1 went: a2 follows it, though the other replica is idle (within the margin)
    assert (await d.acquire("a2", blocks(SYSTEM_A, 2))) is r
    assert r.outstanding == 2 and d.replicas[1 - r.index].outstanding == 0
