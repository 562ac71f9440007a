"""Licenses: what each seed dataset's card says, `unknown` never shown as a yes, and the filters on them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml
from mixhelpers import seed_recipe

from fleetgen.config import validate
from fleetgen.errors import ConfigError
from fleetgen.mix import MixRecipe, build_mix, read_prompt_records
from fleetgen.mix.adapters import ADAPTERS
from fleetgen.mix.licenses import commercial_use

# The `license:` of each seed dataset's card (checked 2026-12): the adapters must record these.
SEED_LICENSES = {
    "infinity_instruct": "cc-by-sa-4.0",  # BAAI/Infinity-Instruct (0625)
    "webinstructsub": "apache-2.0",  # TIGER-Lab/WebInstructSub (its socratic rows: cc-by-nc-4.0, per row)
    "codefeedback": "apache-2.0",  # m-a-p/CodeFeedback-Filtered-Instruction
    "metamathqa": "mit",  # meta-math/MetaMathQA
    "hermes_function_calling": "apache-2.0",  # NousResearch/hermes-function-calling-v1
    "agentinstruct": None,  # THUDM/AgentInstruct: its card states no license
}


def recipe(data: dict) -> MixRecipe:
    return validate(MixRecipe, data, source="test")


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("apache-2.0", "yes"),
        ("MIT", "yes"),
        ("cc-by-sa-4.0", "yes"),
        ("cc-by-nc-4.0", "no"),
        ("cc-by-nc-sa-4.0", "no"),
        ("unknown", "unknown"),
        (None, "unknown"),
        ("other", "unknown"),
        ("", "unknown"),
    ],
)
def test_commercial_use_is_yes_only_for_a_license_known_to_allow_it(name, expected):
    assert commercial_use(name) == expected


@pytest.mark.parametrize(("adapter", "license_"), SEED_LICENSES.items())
def test_each_seed_adapter_records_its_dataset_card_s_license(adapter, license_):
    assert ADAPTERS[adapter].license == license_


def test_the_mix_report_says_unknown_for_a_source_without_a_license(fixtures, tmp_path):
    s = build_mix(recipe(seed_recipe(fixtures)), tmp_path / "p.jsonl", tmp_path / "report")
    rows = list(read_prompt_records(tmp_path / "p.jsonl"))
    agent = [r for r in rows if r["meta"]["source"] == "agent"]
    assert agent and {(r["meta"]["license"], r["meta"]["commercial_use"]) for r in agent} == {("unknown", "unknown")}
    assert {r["meta"]["commercial_use"] for r in rows if r["meta"]["source"] == "metamath"} == {"yes"}
    md = (tmp_path / "report" / "report.md").read_text()
    assert "| agent | unknown |" in md and md.split("| agent | unknown |")[1].split("\n")[0].endswith("| unknown |")
    assert any(
        line.startswith("| webinstruct | cc-by-nc-4.0 |") and line.endswith("| no |") for line in md.splitlines()
    )
    assert s.sources[-1].licenses == {"unknown": 3}


def test_exclude_unknown_license_and_require_license_filter_and_count(fixtures, tmp_path):
    data = seed_recipe(fixtures, filters={"exclude_unknown_license": True})
    s = build_mix(recipe(data), tmp_path / "a.jsonl")
    assert "unknown" not in {r["meta"]["commercial_use"] for r in read_prompt_records(tmp_path / "a.jsonl")}
    assert s.sources[-1].filtered == {"license unknown": 3} and s.sources[-1].selected == 0

    data = seed_recipe(fixtures, filters={"require_license": ["MIT", "apache-2.0"]})
    s = build_mix(recipe(data), tmp_path / "b.jsonl")
    kept = {r["meta"]["license"] for r in read_prompt_records(tmp_path / "b.jsonl")}
    assert kept and kept <= {"mit", "apache-2.0"}
    by = {st.name: st for st in s.sources}
    assert by["infinity"].selected == 0 and by["infinity"].filtered["license not in require_license"] > 0

    with pytest.raises(ConfigError, match="require_license"):
        recipe(seed_recipe(fixtures, filters={"require_license": []}))


def test_the_cli_flag_refuses_unknown_licenses(fixtures, tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(seed_recipe(fixtures)))
    out = tmp_path / "p.jsonl"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "fleetgen.cli.app",
            "mix",
            str(path),
            "-o",
            str(out),
            "--exclude-unknown-license",
            "--report",
            str(tmp_path / "rep"),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows and "unknown" not in {r["meta"]["commercial_use"] for r in rows}
    summary = json.loads((tmp_path / "rep" / "summary.json").read_text())
    assert {s["name"]: s["filtered"] for s in summary["sources"]}["agent"] == {"license unknown": 3}
