"""What became of one (id, sample): Completed, Failed or Skipped, and the one function that records it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fleetgen.generate.journal.linekey import dumps_line
from fleetgen.generate.observe.stats import Stats
from fleetgen.rows.doneset import DoneSet, id_hash
from fleetgen.rows.result import FailureKind, ResultRow


@dataclass(frozen=True)
class Completed:
    """Every assistant turn of the sample was regenerated; `record`
    is the result line's content (less id, sample, job)."""

    id: str
    sample: int
    record: ResultRow
    truncated: bool
    prompt_tokens: int
    completion_tokens: int
    turns_with_ids: int = 0  # regenerated turns whose server returned the token ids it was fed and sampled
    turns_without_ids: int = 0  # ... and those it did not (asked, but none came back)
    ids_missing: dict[str, int] = field(default_factory=dict)  # those, by why (token_ids.MISSING codes)


@dataclass(frozen=True)
class Failed:
    """The sample (or, with sample None, the whole input row) cannot be done; a later run may retry it."""

    id: str | None
    sample: int | None
    reason: str
    kind: FailureKind
    line: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Skipped:
    """Already recorded by an earlier run."""

    id: str
    sample: int


Outcome = Completed | Failed | Skipped


@dataclass
class Batch:
    """Lines waiting for the next group commit, and each result line's key (id hash, sample) for the key index."""

    results: list[bytes] = field(default_factory=list)
    errors: list[bytes] = field(default_factory=list)
    hashes: list[int] = field(default_factory=list)  # id_hash of each result line's id, as the done set took it
    samples: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.results) + len(self.errors)


def record(outcome: Outcome, batch: Batch, done: DoneSet, stats: Stats, job: str | None = None) -> None:
    """Add the outcome's line to the batch and advance the counters; a pair already recorded is dropped.

    `job` is the digest of the identity the run was made with (job_history.py): each line carries it.
    """
    tag = {"job": job} if job is not None else {}
    match outcome:
        case Completed():
            h = id_hash(outcome.id)  # once: the done set and the key index both take it
            if not done.add_hash(h, outcome.sample):
                stats.duplicates_dropped += 1
                return
            batch.results.append(dumps_line({"id": outcome.id, "sample": outcome.sample, **outcome.record, **tag}))
            batch.hashes.append(h)
            batch.samples.append(outcome.sample)
            stats.ok += 1
            stats.truncated += outcome.truncated
            stats.count_tool_turns(outcome.record)
            stats.prompt_tokens += outcome.prompt_tokens
            stats.completion_tokens += outcome.completion_tokens
            stats.turns_with_ids += outcome.turns_with_ids
            stats.turns_without_ids += outcome.turns_without_ids
            for why, n in outcome.ids_missing.items():
                stats.ids_missing[why] = stats.ids_missing.get(why, 0) + n
        case Failed(sample=None):
            if outcome.line is not None:
                if outcome.line in done.bad_lines:
                    return
                done.bad_lines.add(outcome.line)
            batch.errors.append(
                dumps_line(
                    {
                        "id": outcome.id,
                        "sample": None,
                        "line": outcome.line,
                        "kind": outcome.kind,
                        "reason": outcome.reason,
                        **tag,
                    }
                )
            )
            stats.errors += 1
            stats.input_errors += 1
        case Failed():
            assert outcome.id is not None
            if not done.add(outcome.id, outcome.sample):
                stats.duplicates_dropped += 1
                return
            batch.errors.append(
                dumps_line(
                    {
                        "id": outcome.id,
                        "sample": outcome.sample,
                        "line": outcome.line,
                        "kind": outcome.kind,
                        "reason": outcome.reason,
                        **outcome.extra,
                        **tag,
                    }
                )
            )
            stats.errors += 1
            stats.truncated += outcome.kind == "truncated"
        case Skipped():
            stats.resumed += 1
