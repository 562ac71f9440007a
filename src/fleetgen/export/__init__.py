"""`fleetgen export`: result records into drafter-training files (SpecForge, ShareGPT, OpenAI, token ids)."""

from fleetgen.export.config import ExportConfig
from fleetgen.export.formats import RowRejected, TokensFormat
from fleetgen.export.formats.tokens import load_tokenizer
from fleetgen.export.results import iter_results
from fleetgen.export.run import export
from fleetgen.export.split import split_of
from fleetgen.export.summary import ExportSummary

__all__ = [
    "ExportConfig",
    "ExportSummary",
    "RowRejected",
    "TokensFormat",
    "export",
    "iter_results",
    "load_tokenizer",
    "split_of",
]
