"""`fleetgen generate`: regenerate every (prompt, sample) across the fleet, exactly once, resumable."""

from fleetgen.generate.config import GenerateConfig
from fleetgen.generate.outcomes import Completed, Failed, Outcome, Skipped
from fleetgen.generate.profiles import SamplingProfile
from fleetgen.generate.records import BadRow, PromptRecord, normalize, read_prompts
from fleetgen.generate.runner import generate, run
from fleetgen.generate.shards import ShardDone, ShardedRun, ShardFailed, ShardOutcome, run_shards
from fleetgen.generate.stats import ReplicaStats, Stats

__all__ = [
    "BadRow",
    "Completed",
    "Failed",
    "GenerateConfig",
    "Outcome",
    "PromptRecord",
    "ReplicaStats",
    "SamplingProfile",
    "ShardDone",
    "ShardFailed",
    "ShardOutcome",
    "ShardedRun",
    "Skipped",
    "Stats",
    "generate",
    "normalize",
    "read_prompts",
    "run",
    "run_shards",
]
