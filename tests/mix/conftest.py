"""Fixtures for the mix tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from mixhelpers import FIXTURES


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES
