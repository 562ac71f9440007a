"""`fleetgen export`: result records into drafter-training files (SpecForge, ShareGPT, OpenAI, token ids)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleetgen._lazy import lazy_exports

# public name -> the module defining it; loaded on first use (see fleetgen._lazy)
_EXPORTS = {
    "ExportConfig": "fleetgen.export.config",
    "ExportSummary": "fleetgen.export.summary",
    "RowRejected": "fleetgen.export.formats",
    "TokensFormat": "fleetgen.export.formats",
    "export": "fleetgen.export.run",
    "iter_results": "fleetgen.export.results",
    "load_tokenizer": "fleetgen.export.formats.tokens",
    "split_of": "fleetgen.export.split",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from fleetgen.export.config import ExportConfig
    from fleetgen.export.formats import RowRejected, TokensFormat
    from fleetgen.export.formats.tokens import load_tokenizer
    from fleetgen.export.results import iter_results
    from fleetgen.export.run import export
    from fleetgen.export.split import split_of
    from fleetgen.export.summary import ExportSummary

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
