"""Clear errors for broken recipes and inputs, from the library and as one CLI line with a hint."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml
from mixhelpers import seed_recipe

from fleetgen.config import validate
from fleetgen.errors import ConfigError, InputError
from fleetgen.mix import MixRecipe, build_mix, load_recipe


def write(tmp_path, data) -> str:
    p = tmp_path / "recipe.yaml"
    p.write_text(yaml.safe_dump(data))
    return str(p)


def test_unknown_adapter_lists_the_known_ones(fixtures, tmp_path):
    data = seed_recipe(fixtures)
    data["sources"][0]["adapter"] = "infinity"
    with pytest.raises(ConfigError) as e:
        build_mix(load_recipe(write(tmp_path, data)), tmp_path / "o.jsonl")
    assert "unknown adapter 'infinity'" in e.value.message
    assert "infinity_instruct" in e.value.hint and "sharegpt" in e.value.hint


def test_missing_local_file(fixtures, tmp_path):
    data = seed_recipe(fixtures)
    data["sources"][5]["path"] = "local/agent_traces.jsonl"
    with pytest.raises(InputError, match=r"source 'agent': file not found: local/agent_traces.jsonl"):
        build_mix(load_recipe(write(tmp_path, data)), tmp_path / "o.jsonl")


def test_quotas_must_sum_to_one(fixtures, tmp_path):
    data = seed_recipe(fixtures)
    data["quotas"]["domain"]["general"] = 0.5
    with pytest.raises(ConfigError) as e:
        load_recipe(write(tmp_path, data))
    assert "recipe.yaml" in e.value.message and "quotas.domain" in e.value.message and "sum to 1.2" in e.value.message


def test_unknown_quota_domain_and_unknown_field(fixtures, tmp_path):
    data = seed_recipe(fixtures)
    data["quotas"]["domain"] = {"general": 0.5, "poetry": 0.5}
    with pytest.raises(ConfigError, match="unknown domain"):
        load_recipe(write(tmp_path, data))
    data = seed_recipe(fixtures, totl=5)
    with pytest.raises(ConfigError, match="totl"):
        load_recipe(write(tmp_path, data))


def test_dataset_without_needed_columns_names_the_columns_found(fixtures, tmp_path):
    data = seed_recipe(fixtures)
    data["sources"][2]["adapter"] = "metamathqa"  # CodeFeedback rows have query but no original_question
    data["sources"][2]["max_per_original_question"] = None
    with pytest.raises(InputError) as e:
        build_mix(validate(MixRecipe, data, source="t"), tmp_path / "o.jsonl")
    msg = e.value.message
    assert "source 'codefeedback'" in msg and "original_question" in msg
    assert "columns found: query, answer, resource, lang" in msg


def test_cap_on_an_adapter_without_original_questions(fixtures, tmp_path):
    data = seed_recipe(fixtures)
    data["sources"][0]["max_per_original_question"] = 2
    with pytest.raises(ConfigError, match="max_per_original_question"):
        build_mix(validate(MixRecipe, data, source="t"), tmp_path / "o.jsonl")


def test_unknown_output_format(fixtures, tmp_path):
    with pytest.raises(ConfigError, match="unknown format"):
        build_mix(validate(MixRecipe, seed_recipe(fixtures), source="t"), tmp_path / "o.csv")


def test_cli_prints_one_line_and_a_hint(fixtures, tmp_path):
    data = seed_recipe(fixtures)
    data["sources"][1]["adapter"] = "webinstruct"
    p = subprocess.run(
        [sys.executable, "-m", "fleetgen.cli.app", "mix", write(tmp_path, data), "-o", str(tmp_path / "o.jsonl")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2
    assert "error: unknown adapter 'webinstruct'" in p.stderr and "hint: known adapters:" in p.stderr
    assert "Traceback" not in p.stderr


def test_cli_builds_the_mix(fixtures, tmp_path):
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "fleetgen.cli.app",
            "mix",
            write(tmp_path, seed_recipe(fixtures)),
            "-o",
            str(tmp_path / "o.jsonl"),
            "--report",
            str(tmp_path / "rep"),
            "--seed",
            "3",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "o.jsonl").stat().st_size > 0 and (tmp_path / "rep" / "report.md").exists()
    assert '"seed": 3' in (tmp_path / "rep" / "summary.json").read_text()
