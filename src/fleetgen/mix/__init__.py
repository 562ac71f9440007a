"""`fleetgen mix`: a balanced, deduplicated prompt set from instruction datasets, to domain quotas."""

from fleetgen.mix.adapters import ADAPTERS
from fleetgen.mix.build import build_mix
from fleetgen.mix.domains import DOMAINS
from fleetgen.mix.recipe import FilterSpec, MixRecipe, QuotaSpec, SourceSpec, load_recipe
from fleetgen.records import PromptRecord, validate_prompt_record
from fleetgen.mix.summary import MixSummary, SourceStats
from fleetgen.mix.writer import read_prompt_records

__all__ = [
    "ADAPTERS",
    "DOMAINS",
    "FilterSpec",
    "MixRecipe",
    "MixSummary",
    "PromptRecord",
    "QuotaSpec",
    "SourceSpec",
    "SourceStats",
    "build_mix",
    "load_recipe",
    "read_prompt_records",
    "validate_prompt_record",
]
