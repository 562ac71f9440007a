"""The public API of fleetgen.generate is exactly what __all__ says."""

import fleetgen.generate as g


def test_exports_are_declared_and_importable():
    assert sorted(g.__all__) == sorted(set(g.__all__))
    for name in g.__all__:
        assert getattr(g, name) is not None
    assert {"generate", "GenerateConfig", "Completed", "Failed", "Skipped", "Stats"} <= set(g.__all__)
