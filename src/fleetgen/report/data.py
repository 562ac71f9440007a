"""What a report reads from an output directory, reduced to one small row per result (bounded memory)."""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleetgen.export.results import ReadCounts, domain_of, finish_reasons, iter_errors, iter_results
from fleetgen.rows.history import read_history
from fleetgen.rows.runs import RunRecord, read_runs
from fleetgen.rows.token_ids import recorded_turns


@dataclass(slots=True)
class Row:
    """The numbers one result contributes to the report."""

    id: str
    domain: str
    source: str
    prompt_tokens: int
    completion_tokens: int
    finish: list[str]
    replicas: list[str]
    started_at: float | None
    ended_at: float | None
    has_reasoning: bool  # some assistant turn has reasoning_content
    reasoning_chars: int
    answer_chars: int
    # Tokens of the reasoning and of the answer, from the sampled ids (rows/token_ids.py); None where they
    # cannot be told apart without a tokenizer (a turn with reasoning and no known `</think>` id) or a
    # regenerated turn carries no ids.
    reasoning_tokens: int | None = None
    answer_tokens: int | None = None
    truncated: bool = False  # a regenerated turn hit its token budget (the row's `truncated`)
    turns_with_ids: int = 0  # regenerated turns that carry the server's token ids
    turns_without_ids: int = 0
    ids_missing: tuple[str, ...] = ()  # why, for each turn without ids (token_ids.MISSING labels, or "not requested")
    profile: str | None = None  # the sampling profile, in a job with profiles
    cut: str | None = None  # why the sample ended at the target's turn (generate/turns/tool_turns.py)
    job: str | None = None  # digest of the job identity that made the row (rows/history.py)


@dataclass
class Run:
    """One generate output directory as the report sees it."""

    outdir: Path
    rows: list[Row] = field(default_factory=list)
    errors: Counter = field(default_factory=Counter)
    error_examples: dict[str, str] = field(default_factory=dict)
    stats: dict[str, Any] | None = None
    job: dict[str, Any] | None = None
    mix: dict[str, Any] | None = None
    model: str | None = None
    corrupt_lines: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)  # job-history.jsonl: each identity it ran with
    error_jobs: Counter = field(default_factory=Counter)  # error rows per job digest (None: untagged)
    runs: list[RunRecord] = field(default_factory=list)  # runs.jsonl: every generate run of this directory


def _shard_stats(outdir: Path) -> dict[str, Any] | None:
    """The stats of a run done by N `--shard` processes, merged into one."""
    from fleetgen.rows.files import STATS_FILES
    from fleetgen.rows.stats_file import merge_stats

    paths = sorted(p for p in outdir.glob("stats.shard-*.json") if STATS_FILES.match(p.name)) if outdir.is_dir() else []
    parts = [d for d in map(_json, paths) if d]
    return merge_stats(parts) if parts else None


def _json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _ids_missing(rec: dict[str, Any], assistants: int) -> tuple[str, ...]:
    from fleetgen.rows.token_ids import MISSING, missing_turns

    if not isinstance(rec.get("token_ids"), dict):
        return ("not requested",) * assistants  # --no-token-ids (or a run older than token ids)
    return tuple(MISSING.get(why, MISSING[None]) for _, why in missing_turns(rec))


def error_reason(rec: dict[str, Any]) -> str:
    """A reason short and stable enough to count: kind plus the message with numbers and quotes blurred."""
    text = str(rec.get("reason") or "unknown")
    text = re.sub(r"^turn \d+: ", "", text)
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "…", text)
    text = re.sub(r"\d+", "N", text)
    return f"{rec.get('kind') or 'error'}: {text[:70]}"


def _packed_len(value: Any) -> int:
    """How many ids a packed list holds (4 base64 characters each), without unpacking it."""
    return len(value) if isinstance(value, list) else len(value or "") // 4


def _token_split(
    rec: dict[str, Any], assistants: list[dict[str, Any]], think_close: int | None
) -> tuple[int | None, int | None]:
    """(reasoning tokens, answer tokens) of a record from its sampled ids; (None, None) where they cannot be told."""
    field_ = rec.get("token_ids")
    turns = field_.get("turns") if isinstance(field_, dict) else None
    if not isinstance(turns, list) or len(turns) != len(assistants) or any(t is None for t in turns):
        return None, None
    reasoning = answer = 0
    unpacked = None
    for k, (msg, t) in enumerate(zip(assistants, turns)):
        n = _packed_len(t.get("completion"))
        if not msg.get("reasoning_content"):
            answer += n
            continue
        if think_close is None:
            return None, None
        if unpacked is None:
            try:
                unpacked = recorded_turns(rec) or []
            except (ValueError, TypeError, KeyError):
                return None, None
        ids = unpacked[k].completion if k < len(unpacked) and unpacked[k] is not None else []
        if think_close not in ids:
            return None, None
        r = ids.index(think_close) + 1
        reasoning += r
        answer += len(ids) - r
    return reasoning, answer


def load_run(outdir: Path, mix_report: Path | None = None, *, think_close: int | None = None) -> Run:
    """The report's view of an output directory; `think_close`:
    the `</think>` id, to split reasoning from answer tokens."""
    run = Run(outdir=Path(outdir))
    counts = ReadCounts()
    for rec in iter_results(outdir, counts):
        usage = rec.get("usage") or {}
        timing = rec.get("timing") or {}
        replica = rec.get("replica")
        reps = replica if isinstance(replica, list) else [replica]
        start, lat = timing.get("started_at"), timing.get("latency_s")
        assistants = [m for m in rec["messages"] if m.get("role") == "assistant"]
        run.model = run.model or rec.get("model")
        id_turns = (rec.get("token_ids") or {}).get("turns") if isinstance(rec.get("token_ids"), dict) else None
        with_ids = sum(t is not None for t in id_turns) if id_turns is not None else 0
        finish = [str(f) for f in finish_reasons(rec)]
        reasoning_tokens, answer_tokens = _token_split(rec, assistants, think_close)
        run.rows.append(
            Row(
                id=str(rec["id"]),
                domain=domain_of(rec),
                source=str((rec.get("meta") or {}).get("source") or "unknown"),
                prompt_tokens=int(usage.get("prompt_tokens") or 0),
                completion_tokens=int(usage.get("completion_tokens") or 0),
                finish=finish,
                replicas=[str(r) for r in reps if r],
                started_at=start,
                ended_at=(start + lat) if start is not None and lat is not None else None,
                has_reasoning=any(m.get("reasoning_content") for m in assistants),
                reasoning_chars=sum(len(m.get("reasoning_content") or "") for m in assistants),
                answer_chars=sum(len(m.get("content") or "") for m in assistants),
                reasoning_tokens=reasoning_tokens,
                answer_tokens=answer_tokens,
                truncated=bool(rec["truncated"]) if "truncated" in rec else "length" in finish,
                turns_with_ids=with_ids,
                turns_without_ids=len(assistants) - with_ids,
                ids_missing=_ids_missing(rec, len(assistants)) if with_ids < len(assistants) else (),
                profile=rec.get("profile"),
                cut=(rec.get("cut") or {}).get("reason"),
                job=rec.get("job"),
            )
        )
    run.corrupt_lines = counts.corrupt_lines
    for rec in iter_errors(outdir):
        reason = error_reason(rec)
        run.errors[reason] += 1
        run.error_jobs[rec.get("job")] += 1
        run.error_examples.setdefault(reason, f"{rec.get('id')}#{rec.get('sample')}: {str(rec.get('reason'))[:160]}")
    run.stats = _json(run.outdir / "stats.json") or _shard_stats(run.outdir)
    run.job = _json(run.outdir / "job.json")
    run.history = read_history(run.outdir)
    run.runs = read_runs(run.outdir)
    if mix_report is not None:
        path = mix_report / "summary.json" if mix_report.is_dir() else mix_report
        run.mix = _json(path)
    return run
