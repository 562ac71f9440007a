"""stats.json: one run's summary, merged across shards, and the words for a replica that stopped answering or froze."""

from __future__ import annotations

from typing import Any


def merge_stats(parts: list[dict]) -> dict:
    """The stats.json of N shards as one run's: counters summed,
    rates added, wall the longest, replicas listed per shard."""
    out: dict = {
        "rows": {},
        "tokens": {},
        "wall_s": 0.0,
        "output_tokens_per_s": 0.0,
        "interrupted": False,
        "stopped_reason": None,
        "replicas": [],
        "shards": len(parts),
    }
    for part in parts:
        for group in ("rows", "tokens"):
            for key, value in (part.get(group) or {}).items():
                if isinstance(value, (int, float)):
                    out[group][key] = out[group].get(key, 0) + value
        out["wall_s"] = max(out["wall_s"], part.get("wall_s") or 0.0)
        out["output_tokens_per_s"] += part.get("output_tokens_per_s") or 0.0
        out["interrupted"] = out["interrupted"] or bool(part.get("interrupted"))
        out["stopped_reason"] = out["stopped_reason"] or part.get("stopped_reason")
        out["replicas"] += part.get("replicas") or []
        ids = part.get("token_ids") or {}
        mine = out.setdefault("token_ids", {"turns_with": 0, "turns_without": 0, "without_by_reason": {}})
        for key in ("turns_with", "turns_without"):
            mine[key] += int(ids.get(key) or 0)
        for why, n in (ids.get("without_by_reason") or {}).items():
            mine["without_by_reason"][why] = mine["without_by_reason"].get(why, 0) + int(n or 0)
        out.setdefault("notes", []).extend(n for n in part.get("notes") or [] if n not in out["notes"])
    if parts and "total" in out["rows"]:
        out["rows"]["total"] = parts[0]["rows"]["total"]  # each shard counts the whole prompt file
    return out


def describe_silence(gone: dict[str, Any]) -> str:
    """The words after "replica N stopped answering" for Stats.stopped_answering's dict (summary, report)."""
    text = (
        f"{gone['since_s']:.1f}s into the run (its last answer; silent for {gone['silent_for_s']:.1f}s): "
        f"{gone['unanswered']} request(s) got no answer there, {gone['moved']} of them answered by another replica"
    )
    if gone.get("in_flight"):
        text += f", {gone['in_flight']} still in flight"
    return text


def describe_freezes(frozen: dict[str, Any]) -> str:
    """The words after "replica N" for Stats.frozen's dict (summary): when it froze, what moved, when it came back."""
    parts = []
    for f in frozen["episodes"][-3:]:
        back = (
            f"rejoined at {f['rejoined_at_s']:.1f}s (a probe answered)"
            if f["rejoined_at_s"] is not None
            else "not back by the end of the run"
        )
        parts.append(
            f"at {f['at_s']:.1f}s (no answer for {f['silent_s']:.1f}s while the others answered; the bound "
            f"their pace set: {f['bound_s']:.1f}s): {f['resent']} request(s) re-sent, {back}"
        )
    more = f" (the last 3 of {frozen['count']})" if frozen["count"] > 3 else ""
    return f"was frozen {frozen['count']} time(s){more}: " + "; ".join(parts)
