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


def test_two_concurrent_runs_leave_the_thresholds_as_they_found_them(gc_settings, tmp_path):
    """Run A enters first and ends first while run B still runs: the settings come back only when B ends too.

    Both runs are the public `generate.run()` against STAND-IN servers that hold every request until
    released, so the order (A in, B in, A out, B out) is set by the test, not by timing.
    """
    import asyncio

    from helpers import write_prompts
    from standin_server import StandinServer

    from fleetgen.generate import GenerateConfig
    from fleetgen.generate.runner import run

    gc.set_threshold(700, 10, 10)
    servers = [StandinServer(hang_after=0), StandinServer(hang_after=0)]
    urls = [s.start() for s in servers]

    def config(name: str, url: str) -> GenerateConfig:
        return GenerateConfig(
            prompts=write_prompts(tmp_path / f"{name}.jsonl", 4),
            output_dir=tmp_path / name,
            endpoints=[url],
            model="standin",
            max_tokens=4,
            concurrency=4,
            hedge=False,
        )

    async def until_held(server: StandinServer) -> None:
        while not server.hung:  # the run is inside its loop once its first request reached the server
            await asyncio.sleep(0.01)

    async def scenario() -> None:
        a = asyncio.create_task(run(config("a", urls[0]), handle_signals=False))
        await until_held(servers[0])
        b = asyncio.create_task(run(config("b", urls[1]), handle_signals=False))
        await until_held(servers[1])
        servers[0].release()
        assert (await a).ok == 4
        assert gc.get_threshold()[0] == 50_000  # B still runs: still tuned
        servers[1].release()
        assert (await b).ok == 4

    try:
        asyncio.run(scenario())
    finally:
        for s in servers:
            s.stop()
    assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_freeze_count() == 0


def test_nested_uses_put_back_only_at_the_outermost_exit(gc_settings):
    gc.set_threshold(700, 10, 10)
    outer = fewer_collections(young=50_000)
    inner = fewer_collections(young=50_000)
    outer.__enter__()
    inner.__enter__()
    outer.__exit__(None, None, None)  # not the reverse order: the inner one is still inside
    assert gc.get_threshold() == (50_000, 10, 10)
    inner.__exit__(None, None, None)
    assert gc.get_threshold() == (700, 10, 10) and gc.get_freeze_count() == 0
