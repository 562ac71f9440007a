"""`fleetgen generate`: regenerate every (prompt, sample) across the fleet, exactly once, resumable."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleetgen._lazy import lazy_exports

# public name -> the module defining it; loaded on first use (see fleetgen._lazy)
_EXPORTS = {
    "BadRow": "fleetgen.generate.records",
    "Completed": "fleetgen.generate.outcomes",
    "Failed": "fleetgen.generate.outcomes",
    "GenerateConfig": "fleetgen.generate.config",
    "Outcome": "fleetgen.generate.outcomes",
    "PromptRecord": "fleetgen.generate.records",
    "ReplicaStats": "fleetgen.generate.stats",
    "SamplingProfile": "fleetgen.generate.profiles",
    "ShardDone": "fleetgen.generate.shards",
    "ShardFailed": "fleetgen.generate.shards",
    "ShardOutcome": "fleetgen.generate.shards",
    "ShardedRun": "fleetgen.generate.shards",
    "Skipped": "fleetgen.generate.outcomes",
    "Stats": "fleetgen.generate.stats",
    "generate": "fleetgen.generate.runner",
    "normalize": "fleetgen.generate.records",
    "read_prompts": "fleetgen.generate.records",
    "run": "fleetgen.generate.runner",
    "run_shards": "fleetgen.generate.shards",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from fleetgen.generate.config import GenerateConfig
    from fleetgen.generate.outcomes import Completed, Failed, Outcome, Skipped
    from fleetgen.generate.profiles import SamplingProfile
    from fleetgen.generate.records import BadRow, PromptRecord, normalize, read_prompts
    from fleetgen.generate.runner import generate, run
    from fleetgen.generate.shards import ShardDone, ShardedRun, ShardFailed, ShardOutcome, run_shards
    from fleetgen.generate.stats import ReplicaStats, Stats

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
