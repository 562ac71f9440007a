"""docs/config-reference.md is what the config models and the CLI say today; every field has a description."""

from __future__ import annotations

from pathlib import Path

from fleetgen.config_reference import COMMAND, render, sections
from fleetgen.run.config import JobConfig

PAGE = Path(__file__).parents[2] / "docs" / "config-reference.md"


def test_the_committed_reference_page_is_current():
    assert PAGE.read_text(encoding="utf-8") == render(), f"docs/config-reference.md is stale: run `{COMMAND}`"


def test_every_field_of_the_job_file_has_a_description():
    missing = [
        f"{s.path or '(top)'}.{name}"
        for s in sections(JobConfig)
        for name, f in s.model.model_fields.items()
        if not (f.description or "").strip()
    ]
    assert missing == []


def test_the_page_lists_each_section_and_the_flag_or_yaml_only():
    page = render()
    for title in (
        "## `fleet`",
        "## `generate`",
        "## `generate.sampling`",
        "## `generate.sampling.profiles[]`",
        "## `generate.transport`",
        "## `generate.warmup`",
        "## `export`",
        "## `report`",
        "## `mix.sources[]`",
    ):
        assert title in page
    row = next(line for line in page.splitlines() if line.startswith("| `export.reasoning` "))
    assert "`export --reasoning-in-data`" in row and "train \\| context \\| drop" in row
    row = next(line for line in page.splitlines() if line.startswith("| `generate.transport.max_attempts` "))
    assert "`generate --max-attempts`" in row and "`6`" in row  # a section's field: a flag of its own name
    row = next(line for line in page.splitlines() if line.startswith("| `generate.warmup.enabled` "))
    assert "`generate --warmup/--no-warmup`" in row  # named as it was before the sections: flat, prefixed
    row = next(line for line in page.splitlines() if line.startswith("| `generate.sharding.lease_group` "))
    assert "*YAML only*" in row
