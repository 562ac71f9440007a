"""Layer presets: speculators' EAGLE-3 default and DFlash's spacing, as capture indices (0 = embeddings)."""

from __future__ import annotations

import pytest

from fleetgen.capture import resolve_layers
from fleetgen.errors import ConfigError


def test_eagle3_is_speculators_default_with_the_last_layer():
    assert resolve_layers("eagle3", 36) == [2, 18, 33, 36]  # Qwen3-8B
    assert resolve_layers("eagle3", 30) == [2, 15, 27, 30]  # SmolLM2-135M


def test_dflash_reads_each_target_layers_output_and_ends_with_the_last():
    from fleetgen.capture.layers import dflash_target_layers

    assert dflash_target_layers(36, 5) == [1, 9, 17, 25, 33]  # the drafter's target_layer_ids (issue 47)
    assert resolve_layers("dflash", 36, 5) == [2, 10, 18, 26, 34, 36]  # layer t's output is index t + 1
    assert resolve_layers("dflash", 30, 5) == [2, 9, 15, 21, 28, 30]
    assert resolve_layers("dflash", 36, 1) == [19, 36]


def test_a_list_is_sorted_and_checked_against_the_model():
    assert resolve_layers("30,2,15", 30) == [2, 15, 30]
    assert resolve_layers([0, 1], 30) == [0, 1]
    with pytest.raises(ConfigError, match="within"):
        resolve_layers("2,31", 30)
    with pytest.raises(ConfigError, match="distinct"):
        resolve_layers("2,2", 30)
    with pytest.raises(ConfigError, match="preset"):
        resolve_layers("eagle", 30)
