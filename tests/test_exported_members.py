"""The public API is what `__all__` lists, and every name in it exists."""

from __future__ import annotations

import importlib

import pytest

import fleetgen

PACKAGES = [
    "fleetgen",
    "fleetgen.fleet",
    "fleetgen.doctor",
    "fleetgen.mix",
    "fleetgen.generate",
    "fleetgen.export",
    "fleetgen.capture",
    "fleetgen.run",
    "fleetgen.metrics",
]


@pytest.mark.parametrize("name", PACKAGES)
def test_all_names_exist(name):
    module = importlib.import_module(name)
    missing = [n for n in module.__all__ if not hasattr(module, n)]
    assert missing == []


def test_top_level_exposes_each_stage_entry_point():
    members = {n for n in dir(fleetgen) if not n.startswith("_")}
    public = set(fleetgen.__all__) - {"__version__"}
    for entry in ("up", "down", "run_doctor", "build_mix", "build_report", "run_job"):
        assert entry in public and callable(getattr(fleetgen, entry))
    modules = {n for n in members if type(getattr(fleetgen, n)).__name__ == "module"}
    assert members - public - modules == set(), "a public name is missing from __all__"


def test_stage_packages_are_not_shadowed_by_functions():
    import fleetgen.export
    import fleetgen.generate

    assert callable(fleetgen.generate.generate) and callable(fleetgen.export.export)


def test_the_cli_starts_without_the_heavy_stage_libraries():
    """`fleetgen generate` must not pay for mix's datasketch/scipy or report's matplotlib at start (~0.8 s)."""
    import subprocess
    import sys

    code = (
        "import sys, fleetgen.cli.app; "
        "print(sorted(m for m in ('datasketch', 'scipy', 'matplotlib') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
