"""`fleetgen mix`: a balanced, deduplicated prompt set from instruction datasets, to domain quotas."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleetgen._lazy import lazy_exports

# public name -> the module defining it; loaded on first use (see fleetgen._lazy)
_EXPORTS = {
    "ADAPTERS": "fleetgen.mix.adapters",
    "DOMAINS": "fleetgen.mix.domains",
    "FilterSpec": "fleetgen.mix.recipe",
    "MixRecipe": "fleetgen.mix.recipe",
    "MixSummary": "fleetgen.mix.summary",
    "PromptRecord": "fleetgen.rows.prompt",
    "QuotaSpec": "fleetgen.mix.recipe",
    "SourceSpec": "fleetgen.mix.recipe",
    "SourceStats": "fleetgen.mix.summary",
    "build_mix": "fleetgen.mix.build",
    "load_recipe": "fleetgen.mix.recipe",
    "read_prompt_records": "fleetgen.mix.writer",
    "validate_prompt_record": "fleetgen.rows.prompt",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from fleetgen.mix.adapters import ADAPTERS
    from fleetgen.mix.build import build_mix
    from fleetgen.mix.domains import DOMAINS
    from fleetgen.mix.recipe import FilterSpec, MixRecipe, QuotaSpec, SourceSpec, load_recipe
    from fleetgen.mix.summary import MixSummary, SourceStats
    from fleetgen.mix.writer import read_prompt_records
    from fleetgen.rows.prompt import PromptRecord, validate_prompt_record

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
