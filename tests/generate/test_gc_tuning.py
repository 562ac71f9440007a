"""While the run loop drives requests the collector runs less often; afterwards the process is as it was."""

from __future__ import annotations

import gc

import pytest

from fleetgen.generate.gc_tuning import fewer_collections


@pytest.fixture
def gc_settings():
    thresholds, frozen = gc.get_threshold(), gc.get_freeze_count()
    yield
    gc.set_threshold(*thresholds)
    if gc.get_freeze_count() and not frozen:
        gc.unfreeze()


def test_inside_startup_objects_are_frozen_and_young_collections_rarer_then_all_is_put_back(gc_settings):
    gc.set_threshold(700, 10, 10)
    assert gc.get_freeze_count() == 0
    with fewer_collections(young=50_000):
        assert gc.get_threshold() == (50_000, 10, 10)
        assert gc.get_freeze_count() > 0
        garbage = []
        garbage.append(garbage)  # a cycle made inside is still collected
        del garbage
        assert gc.collect() >= 1
    assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_freeze_count() == 0


def test_the_callers_own_settings_win(gc_settings):
    gc.set_threshold(100_000, 20, 20)
    with fewer_collections(young=50_000):
        assert gc.get_threshold() == (100_000, 20, 20)  # a higher threshold is kept
    gc.set_threshold(0, 10, 10)  # collections turned off stay off
    with fewer_collections(young=50_000):
        assert gc.get_threshold()[0] == 0
    gc.freeze()
    frozen = gc.get_freeze_count()
    with fewer_collections(young=50_000):
        pass
    assert gc.get_freeze_count() == frozen  # objects the caller froze stay frozen


def test_settings_are_put_back_when_the_run_raises(gc_settings):
    gc.set_threshold(700, 10, 10)
    with pytest.raises(RuntimeError), fewer_collections(young=50_000):
        raise RuntimeError("the run failed")
    assert gc.get_threshold() == (700, 10, 10) and gc.get_freeze_count() == 0
