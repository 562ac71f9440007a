"""cli/_fields.py, the table the CLI builds its options from without pydantic, is what the config models say today."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetgen.cli._config import default, field_help
from fleetgen.cli._fields import FIELDS
from fleetgen.cli.field_table import COMMAND, MODELS, field_info, leaves, model_class, render

TABLE = Path(__file__).parents[2] / "src" / "fleetgen" / "cli" / "_fields.py"


def test_the_committed_table_is_current():
    assert TABLE.read_text(encoding="utf-8") == render(), f"src/fleetgen/cli/_fields.py is stale: run `{COMMAND}`"


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_table_rebuilds_each_default_the_model_gives(name):
    """Read back through Python: a Path stays a Path, a list default a fresh list."""
    model = model_class(name)
    assert set(FIELDS[name]) == set(leaves(model))  # a model in sections: every field of each, by its flat name
    for field in leaves(model):
        info = field_info(model, field)
        if FIELDS[name][field][0] is ...:
            with pytest.raises(TypeError, match="no default"):
                default(name, field)
        else:
            assert default(name, field) == info.get_default(call_default_factory=True), f"{name}.{field}"


def test_a_list_default_is_each_option_s_own():
    first = default("ExportConfig", "finish_reasons")
    first.append("length")
    assert default("ExportConfig", "finish_reasons") == ["stop", "tool_calls"]


def test_a_field_missing_from_the_table_names_the_command_that_rebuilds_it():
    with pytest.raises(KeyError, match="field_table"):
        field_help("FleetConfig", "no_such_field")
