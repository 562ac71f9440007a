"""`fleetgen generate`: regenerate every (prompt, sample) across the fleet, exactly once, resumable."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleetgen._lazy import lazy_exports

# public name -> the module defining it; loaded on first use (see fleetgen._lazy)
_EXPORTS = {
    "BadRow": "fleetgen.generate.prompts.reader",
    "Completed": "fleetgen.generate.journal.outcomes",
    "Failed": "fleetgen.generate.journal.outcomes",
    "GenerateConfig": "fleetgen.generate.config",
    "Outcome": "fleetgen.generate.journal.outcomes",
    "PromptRecord": "fleetgen.generate.prompts.reader",
    "ReplicaStats": "fleetgen.generate.observe.stats",
    "SamplingProfile": "fleetgen.generate.config.profiles",
    "ShardDone": "fleetgen.generate.shards.outcome",
    "ShardFailed": "fleetgen.generate.shards.outcome",
    "ShardOutcome": "fleetgen.generate.shards.outcome",
    "ShardedRun": "fleetgen.generate.shards.run",
    "Skipped": "fleetgen.generate.journal.outcomes",
    "Stats": "fleetgen.generate.observe.stats",
    "generate": "fleetgen.generate.runner",
    "normalize": "fleetgen.generate.prompts.reader",
    "read_prompts": "fleetgen.generate.prompts.reader",
    "run": "fleetgen.generate.runner",
    "run_shards": "fleetgen.generate.shards.run",
    "stamped_fingerprint": "fleetgen.generate.prompts.stamp",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from fleetgen.generate.config import GenerateConfig
    from fleetgen.generate.config.profiles import SamplingProfile
    from fleetgen.generate.journal.outcomes import Completed, Failed, Outcome, Skipped
    from fleetgen.generate.observe.stats import ReplicaStats, Stats
    from fleetgen.generate.prompts.reader import BadRow, PromptRecord, normalize, read_prompts
    from fleetgen.generate.prompts.stamp import stamped_fingerprint
    from fleetgen.generate.runner import generate, run
    from fleetgen.generate.shards.outcome import ShardDone, ShardFailed, ShardOutcome
    from fleetgen.generate.shards.run import ShardedRun, run_shards

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
