"""GenerateConfig in sections: flat keys (job files written before the sections) land in their section, once."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fleetgen.config import load_yaml
from fleetgen.errors import ConfigError
from fleetgen.generate import GenerateConfig
from fleetgen.generate.config.partition import Shard

BASE = {"prompts": "p.jsonl", "output_dir": "out", "endpoints": ["http://127.0.0.1:1"]}


def test_a_flat_file_and_a_sectioned_one_are_the_same_config(tmp_path):
    flat = {
        **BASE,
        "temperature": 0.3,
        "max_attempts": 2,
        "concurrency": 8,
        "shard": "1/4",
        "metrics_port": 0,
        "warmup": False,
        "warmup_timeout_s": 60,
    }
    nested = {
        **BASE,
        "sampling": {"temperature": 0.3},
        "transport": {"max_attempts": 2},
        "routing": {"concurrency": 8},
        "sharding": {"shard": "1/4"},
        "observe": {"metrics_port": 0},
        "warmup": {"enabled": False, "timeout_s": 60},
    }
    configs = []
    for name, data in (("flat", flat), ("nested", nested)):
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(data))
        configs.append(load_yaml(tmp_path / f"{name}.yaml", GenerateConfig))
    assert configs[0] == configs[1]
    c = configs[0]
    assert (c.sampling.temperature, c.transport.max_attempts, c.routing.concurrency, c.warmup.enabled) == (
        0.3,
        2,
        8,
        False,
    )
    assert c.sharding.shard == Shard(1, 4) and c.sharding.rows.suffix == ".shard-1-of-4"  # parsed once, here
    assert c.model_dump(mode="json")["sharding"]["shard"] == "1/4"  # written back as it was read
    assert GenerateConfig.model_validate_json(c.model_dump_json()) == c  # what a shard's process is handed


def test_a_field_given_flat_and_in_its_section_is_refused_by_both_names(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({**BASE, "max_attempts": 2, "transport": {"max_attempts": 3}}))
    with pytest.raises(ConfigError, match="max_attempts and transport.max_attempts are both given"):
        load_yaml(path, GenerateConfig)


def test_a_bad_value_is_named_by_its_section_and_field(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({**BASE, "shard": "4/4", "concurrency": 0}))
    with pytest.raises(ConfigError) as e:
        load_yaml(path, GenerateConfig)
    assert "sharding.shard: Value error, '4/4' is not i/N" in e.value.message
    assert "routing.concurrency: Value error, concurrency must be auto or a number" in e.value.message
    assert str(path) in e.value.message


def test_flags_typed_are_laid_over_the_file_into_their_sections():
    file = {**BASE, "routing": {"concurrency": 8, "hedge": False}, "max_attempts": 2}
    data = GenerateConfig.overlay(file, {"concurrency": 4, "warmup": False})
    c = GenerateConfig.model_validate(data)
    assert (c.routing.concurrency, c.routing.hedge, c.transport.max_attempts, c.warmup.enabled) == (4, False, 2, False)


def test_updated_is_a_validated_copy():
    c = GenerateConfig.model_validate(BASE)
    d = c.updated(shard="0/2", metrics_port=9400, prompts=Path("q.jsonl"))
    assert (d.sharding.shard, d.observe.metrics_port, d.prompts) == (Shard(0, 2), 9400, Path("q.jsonl"))
    assert c.sharding.shard is None  # the original stands
    with pytest.raises(ValueError, match="not both"):
        d.updated(shards=2)  # checked as a file would be


def test_every_field_has_one_flat_name_and_the_identity_is_unchanged_by_the_form():
    flat = GenerateConfig.flat_fields()
    assert len(flat) == len(set(flat.values()))
    assert flat["warmup"] == ("warmup", "enabled") and flat["warmup_timeout_s"] == ("warmup", "timeout_s")
    a = GenerateConfig.model_validate({**BASE, "temperature": 0.2, "tool_match": "name", "shard": "0/2"})
    b = GenerateConfig.model_validate(
        {**BASE, "sampling": {"temperature": 0.2, "tool_match": "name"}, "sharding": {"shard": "0/2"}}
    )
    assert a.declared_identity() == b.declared_identity()
    assert a.declared_identity()["shard"] == "0/2"  # as `run` keyed its stage before the sections
