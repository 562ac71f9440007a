"""Fixtures shared by the generate tests; a module's own fixture of the same name wins over these."""

from __future__ import annotations

import pytest
from standin_server import StandinServer


@pytest.fixture(scope="module")
def standin():
    """A STAND-IN server (not an engine) answering at 4 ms a token, 32 at once: long enough runs to kill mid-way."""
    server = StandinServer(delay_per_token_s=0.004, max_concurrent=32)
    url = server.start()
    yield url
    server.stop()
