"""Export formats: one converter per trainer format, chosen by name."""

from __future__ import annotations

from fleetgen.export.formats.base import Format, RowRejected
from fleetgen.export.formats.openai import OpenAIFormat
from fleetgen.export.formats.sharegpt import ShareGPTFormat
from fleetgen.export.formats.specforge import SpecForgeFormat
from fleetgen.export.formats.speculators import SpeculatorsFormat
from fleetgen.export.formats.tokens import TokensFormat

TEXT_FORMATS: dict[str, type[Format]] = {
    "specforge": SpecForgeFormat,
    "sharegpt": ShareGPTFormat,
    "openai": OpenAIFormat,
}

__all__ = [
    "TEXT_FORMATS",
    "Format",
    "OpenAIFormat",
    "RowRejected",
    "ShareGPTFormat",
    "SpecForgeFormat",
    "SpeculatorsFormat",
    "TokensFormat",
]
