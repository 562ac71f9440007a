"""The fleet state file read as plain JSON (what `status` and `down` do before loading the state models)."""

from __future__ import annotations

import pytest

from fleetgen.errors import FleetError
from fleetgen.fleet.state import read_state
from fleetgen.fleet.state_file import read_state_json, state_path
from fleetgen.fleet.stop import down


def test_no_state_file_is_no_fleet_and_names_the_directory(tmp_path):
    with pytest.raises(FleetError, match=f"no fleet state in {tmp_path}") as e:
        read_state_json(tmp_path)
    assert "fleetgen up" in e.value.hint
    assert down(tmp_path) == 0


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", "\udcff"])
def test_an_unreadable_state_file_is_named_with_what_to_do(tmp_path, text):
    state_path(tmp_path).write_text(text, encoding="utf-8", errors="surrogateescape")
    with pytest.raises(FleetError, match="unreadable") as e:
        read_state_json(tmp_path)
    assert str(state_path(tmp_path)) in e.value.message and "pid" in e.value.hint


def test_a_state_that_parses_but_is_no_fleet_state_is_unreadable_too(tmp_path):
    state_path(tmp_path).write_text('{"engine": "vllm"}', encoding="utf-8")
    assert read_state_json(tmp_path) == {"engine": "vllm"}  # the raw read does not judge the fields
    with pytest.raises(FleetError, match="unreadable"):
        read_state(tmp_path)
    assert down(tmp_path) == 0  # as for no fleet: nothing it can name to stop
