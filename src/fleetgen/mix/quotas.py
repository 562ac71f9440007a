"""Domain quotas: how many rows (or tokens) each domain gets, and which rows, deterministically by seed.

Allocation: each domain's target is its share of `total` (rows: largest-remainder rounding, so
the targets sum to `total` exactly). A domain with fewer candidates than its target gives all
it has. With `on_shortfall: redistribute` the missing amount goes to the domains that still
have spare candidates, in proportion to their shares (repeated until the total is met or no
domain has spare); domains with share 0 never receive. `shrink` writes fewer rows; `error`
stops with the list of short domains.

Selection: within a domain, rows are drawn without replacement with probability proportional
to their source's `weight` (exponential keys, Efraimidis-Spirakis), from one generator seeded by
the recipe seed. Rows: exactly the allocation. Tokens: rows in key order until the domain's
budget is reached, so a domain overshoots its budget by less than one row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fleetgen.errors import InputError


@dataclass(slots=True)
class Allocation:
    """One domain's quota outcome, in the recipe's unit (rows or tokens)."""

    domain: str
    share: float
    target: float
    available: float
    allocated: float
    note: str = ""


def _largest_remainder(amount: float, weights: dict[str, float], integer: bool) -> dict[str, float]:
    total_w = sum(weights.values())
    if total_w <= 0:
        return {d: 0 for d in weights}
    raw = {d: amount * w / total_w for d, w in weights.items()}
    if not integer:
        return raw
    base = {d: math.floor(v + 1e-9) for d, v in raw.items()}
    left = int(round(amount)) - sum(base.values())
    for d in sorted(raw, key=lambda d: (-(raw[d] - base[d]), d))[: max(left, 0)]:
        base[d] += 1
    return base


def allocate(
    shares: dict[str, float], available: dict[str, float], total: float, *, integer: bool, on_shortfall: str
) -> list[Allocation]:
    """Per-domain allocation by the rule in the module docstring."""
    targets = _largest_remainder(total, shares, integer)
    alloc = {d: min(targets[d], available.get(d, 0)) for d in shares}
    notes = {
        d: f"short by {targets[d] - alloc[d]:g}: only {available.get(d, 0):g} available"
        for d in shares
        if alloc[d] < targets[d]
    }
    short = total - sum(alloc.values())
    if short > (0.5 if integer else 1e-9) and on_shortfall == "error":
        raise InputError(
            "domain quotas cannot be met: " + "; ".join(f"{d} {n}" for d, n in notes.items()),
            hint="add sources for these domains, lower their shares, or set on_shortfall: redistribute",
        )
    if on_shortfall == "redistribute":
        while short > (0.5 if integer else 1e-9):
            spare = {
                d: available.get(d, 0) - alloc[d] for d in shares if shares[d] > 0 and available.get(d, 0) > alloc[d]
            }
            if not spare:
                break
            extra = _largest_remainder(short, {d: shares[d] for d in spare}, integer)
            given = 0.0
            for d, x in extra.items():
                x = min(x, spare[d])
                if x > 0:
                    alloc[d] += x
                    given += x
                    if "redistributed" not in notes.get(d, ""):
                        notes[d] = "; ".join(x for x in (notes.get(d), "received redistributed share") if x)
            if given <= 0:  # integer rounding gave nothing: hand out single rows by share order
                for d in sorted(spare, key=lambda d: (-shares[d], d))[: int(short)]:
                    alloc[d] += 1
                    given += 1
            short -= given
    return [Allocation(d, shares[d], targets[d], available.get(d, 0), alloc[d], notes.get(d, "")) for d in shares]


def select(
    domain_of: np.ndarray,
    units: np.ndarray,
    weights: np.ndarray,
    allocations: list[Allocation],
    domain_index: dict[str, int],
    seed: int,
    *,
    by_tokens: bool,
) -> np.ndarray:
    """Indices of the chosen candidates, in a seeded random output order."""
    rng = np.random.default_rng(seed)
    keys = rng.exponential(size=len(domain_of)) / weights
    chosen: list[np.ndarray] = []
    for a in allocations:
        idx = np.flatnonzero(domain_of == domain_index[a.domain])
        if len(idx) == 0 or a.allocated <= 0:
            continue
        ordered = idx[np.argsort(keys[idx], kind="stable")]
        if by_tokens:
            cum = np.cumsum(units[ordered])
            k = int(np.searchsorted(cum, a.allocated, side="left")) + 1
            chosen.append(ordered[: min(k, len(ordered))])
        else:
            chosen.append(ordered[: int(a.allocated)])
    picked = np.concatenate(chosen) if chosen else np.empty(0, dtype=np.int64)
    return picked[rng.permutation(len(picked))]
