"""Sampling profiles: assignment, the body sent, what rows record, and the job identity.

End to end against a STAND-IN server (tests/generate/standin_server.py) that keeps every request
body it received, so a row's recorded parameters are compared with what the server got.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest
from helpers import assert_exactly_once, read_jsonl, write_prompts
from standin_server import StandinServer

from fleetgen.errors import ConfigError, ResumeMismatchError
from fleetgen.generate import GenerateConfig, generate
from fleetgen.generate.config.profiles import NOT_SAMPLING, SamplingProfile, assign
from fleetgen.generate.config.sampling import derived_seed
from fleetgen.generate.dispatch.warmup import WARMUP_PROMPT

PROFILES = [
    {"name": "direct", "weight": 1, "temperature": 0.3, "thinking": False},
    {
        "name": "think",
        "weight": 2,
        "temperature": 1.0,
        "top_k": 20,
        "min_p": 0.05,
        "repetition_penalty": 1.1,
        "max_tokens": 12,
        "reasoning_effort": "high",
        "thinking": True,
        "chat_template_kwargs": {"preserve": True},
        "extra_body": {"ignore_eos": False},
    },
]


def cfg(tmp_path, url, **kw) -> GenerateConfig:
    base = dict(
        prompts=tmp_path / "p.jsonl",
        output_dir=tmp_path / "out",
        endpoints=[url],
        model="standin",
        max_tokens=8,
        concurrency=8,
        hedge=False,
        commit_interval_s=0.0,
        seed=7,
    )
    base.update(kw)
    return GenerateConfig(**base)


@pytest.fixture()
def standin():
    server = StandinServer()
    url = server.start()
    yield server, url
    server.stop()


def test_assignment_is_a_stable_weighted_hash_of_id_and_sample():
    ps = [SamplingProfile(**p) for p in PROFILES]
    picks = [assign(ps, 7, f"p{i}", k).name for i in range(3000) for k in range(2)]
    assert picks == [assign(ps, 7, f"p{i}", k).name for i in range(3000) for k in range(2)]  # pure function
    share = Counter(picks)["think"] / len(picks)
    assert 0.63 < share < 0.70, share  # weight 2 of 3
    other_seed = [assign(ps, 8, f"p{i}", k).name for i in range(3000) for k in range(2)]
    assert other_seed != picks


def test_profile_errors_name_the_field():
    with pytest.raises(ValueError, match="extra_body may not set messages, temperature"):
        SamplingProfile(name="x", extra_body={"messages": [], "temperature": 1})
    with pytest.raises(ValueError, match="extra_body may not set reasoning: rows record the job's policy"):
        SamplingProfile(name="x", extra_body={"reasoning": {"effort": "low"}})
    with pytest.raises(ValueError, match="profile names must be unique, repeated: a"):
        GenerateConfig(prompts="p", output_dir="o", endpoints=["http://h:1"], profiles=[{"name": "a"}, {"name": "a"}])
    with pytest.raises(ValueError, match="reasoning is off but profile.s. t turn thinking on"):
        GenerateConfig(
            prompts="p",
            output_dir="o",
            endpoints=["http://h:1"],
            reasoning="off",
            profiles=[{"name": "t", "thinking": True}],
        )


def test_without_profiles_the_identity_and_rows_are_as_before(tmp_path, standin):
    server, url = standin
    write_prompts(tmp_path / "p.jsonl", 3)
    c = cfg(tmp_path, url)
    assert c.sampling.identity() == {
        "max_tokens": 8,
        "temperature": 0.7,
        "top_p": 1.0,
        "seed": 7,
        "reasoning": "save",
        "truncation": "keep",
    }
    generate(c, handle_signals=False)
    rows = read_jsonl(tmp_path / "out" / "results.jsonl")
    assert all(
        "profile" not in r
        and r["sampling"] == {**c.sampling.identity(), "seed": derived_seed(7, r["id"], r["sample"], 0)}
        for r in rows
    )
    sampling_keys = {k for b in server.bodies for k in b if k not in NOT_SAMPLING}
    assert sampling_keys == {"max_tokens", "temperature", "top_p", "seed"}


def test_two_profiles_every_row_records_exactly_what_the_server_received(tmp_path, standin):
    server, url = standin
    ids = [f"p{i}" for i in range(40)]
    write_prompts(tmp_path / "p.jsonl", 40)
    c = cfg(tmp_path, url, samples=3, profiles=PROFILES)
    stats = generate(c, handle_signals=False)
    assert stats.ok == 120
    rows, _ = assert_exactly_once(tmp_path / "out", ids, 3)
    bodies = [b for b in server.bodies if b["messages"][-1]["content"] != WARMUP_PROMPT]  # the job's own
    by_seed = {b["seed"]: b for b in bodies}
    assert len(by_seed) == len(bodies) == 120  # one request per row: the seed names its (id, sample)
    for r in rows:
        got = by_seed[derived_seed(7, r["id"], r["sample"], 0)]
        # One shape on every row: what the server received, plus the job's policies.
        sent = {k: v for k, v in got.items() if k not in NOT_SAMPLING}
        assert r["sampling"] == {**sent, "reasoning": "save", "truncation": "keep"}, r["id"]
        assert r["profile"] == assign(c.sampling.profiles, 7, r["id"], r["sample"]).name
    names = Counter(r["profile"] for r in rows)
    assert set(names) == {"direct", "think"}
    direct = next(r for r in rows if r["profile"] == "direct")["sampling"]
    think = next(r for r in rows if r["profile"] == "think")["sampling"]
    policies = {"reasoning": "save", "truncation": "keep"}
    assert direct == {
        "max_tokens": 8,
        "temperature": 0.3,
        "top_p": 1.0,
        "seed": direct["seed"],
        "chat_template_kwargs": {"enable_thinking": False},
        **policies,
    }
    assert think == {
        "max_tokens": 12,
        "temperature": 1.0,
        "top_p": 1.0,
        "seed": think["seed"],
        "top_k": 20,
        "min_p": 0.05,
        "repetition_penalty": 1.1,
        "reasoning_effort": "high",
        "chat_template_kwargs": {"preserve": True, "enable_thinking": True},
        "ignore_eos": False,
        **policies,
    }
    job = json.loads((tmp_path / "out" / "job.json").read_text())
    assert [p["name"] for p in job["sampling"]["profiles"]] == ["direct", "think"]

    from fleetgen.report import build_report

    md = build_report(tmp_path / "out", tokenizer=str(tmp_path / "no-tokenizer")).read_text()
    section = md.split("## Sampling profiles")[1].split("## ")[0]
    # The stand-in says 11 words at most: within think's budget of 12 (stop), beyond direct's 8 (length).
    for name, finish, tokens in (("direct", "length 100%", 8), ("think", "stop 100%", 11)):
        line = next(x for x in section.splitlines() if x.startswith(f"| {name} |"))
        cells = [c.strip() for c in line.split("|")[1:-1]]
        assert cells[1] == str(names[name]) and cells[3] == str(tokens) and cells[5] == finish, line


def test_a_resume_with_other_profiles_is_refused_unless_forced(tmp_path, standin):
    _, url = standin
    write_prompts(tmp_path / "p.jsonl", 4)
    generate(cfg(tmp_path, url, profiles=PROFILES), handle_signals=False)
    changed = [dict(PROFILES[0], temperature=0.5), PROFILES[1]]
    with pytest.raises(
        ResumeMismatchError, match=r"sampling\.profiles was .*'temperature': 0\.3.*now .*'temperature': 0\.5"
    ):
        generate(cfg(tmp_path, url, profiles=changed), handle_signals=False)
    with pytest.raises(ResumeMismatchError, match="sampling.profiles was"):
        generate(cfg(tmp_path, url), handle_signals=False)  # profiles dropped
    stats = generate(cfg(tmp_path, url, profiles=PROFILES), handle_signals=False)  # the same profiles resume
    assert stats.resumed == 4
    stats = generate(cfg(tmp_path, url, profiles=changed, force=True), handle_signals=False)
    assert stats.resumed == 4


def test_cli_reads_profiles_from_a_yaml_or_json_file(tmp_path, standin):
    import subprocess
    import sys

    _, url = standin
    write_prompts(tmp_path / "p.jsonl", 6)
    (tmp_path / "profiles.json").write_text(json.dumps(PROFILES))
    (tmp_path / "profiles.yaml").write_text("profiles:\n  - {name: only, temperature: 0.1}\n")
    base = [
        sys.executable,
        "-m",
        "fleetgen.cli.app",
        "generate",
        str(tmp_path / "p.jsonl"),
        "--endpoint",
        url,
        "--model",
        "standin",
        "--seed",
        "7",
        "--max-tokens",
        "8",
    ]
    r = subprocess.run(
        base + ["-o", str(tmp_path / "a"), "--profiles", str(tmp_path / "profiles.json")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-1500:]
    assert {x["profile"] for x in read_jsonl(tmp_path / "a" / "results.jsonl")} <= {"direct", "think"}
    r = subprocess.run(
        base + ["-o", str(tmp_path / "b"), "--profiles", str(tmp_path / "profiles.yaml")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-1500:]
    assert {x["sampling"]["temperature"] for x in read_jsonl(tmp_path / "b" / "results.jsonl")} == {0.1}
    (tmp_path / "bad.yaml").write_text("name: x\n")
    r = subprocess.run(
        base + ["-o", str(tmp_path / "c"), "--profiles", str(tmp_path / "bad.yaml")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode != 0 and "expected a list of profiles" in r.stderr


def test_config_error_names_the_profile_field(tmp_path):
    from fleetgen.config import validate

    with pytest.raises(ConfigError, match=r"profiles\.0\.top_p"):
        validate(
            GenerateConfig,
            {"prompts": "p", "output_dir": "o", "endpoints": ["http://h:1"], "profiles": [{"name": "a", "top_p": 2}]},
            source="job.yaml",
        )
