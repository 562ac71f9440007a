"""Package names that load on first use (PEP 562), so importing a config module stays cheap.

`import fleetgen.fleet.config` runs `fleetgen/fleet/__init__.py` first; if that imported the
launcher, every CLI command (and `--help`, which reads the config models' field descriptions)
would pay for aiohttp, psutil and the engines. Each package lists its public names here instead
and the module defining a name is imported when the name is first read.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, exports: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """`__getattr__` and `__dir__` for `package`: `exports` maps a public name to the module defining it."""
    ns = importlib.import_module(package).__dict__

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        ns[name] = value  # later reads skip __getattr__
        return value

    def __dir__() -> list[str]:
        return sorted({*ns, *exports})

    return __getattr__, __dir__
