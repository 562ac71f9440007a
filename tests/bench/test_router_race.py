"""The summary arithmetic of bench/router_race.py: arm order, counter deltas, the ratio to the router's best."""

from __future__ import annotations

import sys
from pathlib import Path

_saved = list(sys.path)
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from router_race import arm_orders, counter_deltas, medians  # noqa: E402

sys.path[:] = _saved  # the bench puts tests/ folders first on the path; the rest of the session should not see that


def test_each_arm_goes_first_once_per_cycle_and_every_repeat_runs_every_arm():
    arms = ["fleetgen", "router a", "router b"]
    orders = arm_orders(arms, 4)
    assert [o[0] for o in orders] == ["fleetgen", "router a", "router b", "fleetgen"]
    assert all(sorted(o) == sorted(arms) for o in orders)


def test_counter_deltas_count_only_what_happened_during_the_arm():
    before = [{"hits": 100.0, "queries": 400.0, "generated": 50.0}, {"hits": 0.0, "queries": 0.0, "generated": 0.0}]
    after = [{"hits": 160.0, "queries": 500.0, "generated": 80.0}, {"hits": 40.0, "queries": 100.0, "generated": 90.0}]
    d = counter_deltas(before, after)
    assert d["prefix_cache_hit_rate"] == 0.5  # (60 + 40) / (100 + 100), not the lifetime 200 / 600
    assert d["generated_share"] == [0.25, 0.75]
    assert counter_deltas(before, before)["prefix_cache_hit_rate"] is None


def test_ratio_is_against_the_fastest_router_arm_by_median():
    rows = [
        {"arm": "fleetgen", "wall_s": 10.0, "replica_cpu_s": 20.0},
        {"arm": "fleetgen no-hedge", "wall_s": 5.0, "replica_cpu_s": 5.0},
        {"arm": "fleetgen", "wall_s": 30.0, "replica_cpu_s": 20.0},
        {"arm": "router slow", "wall_s": 40.0, "replica_cpu_s": 50.0},
        {"arm": "router slow", "wall_s": 40.0, "replica_cpu_s": 50.0},
        {"arm": "router fast", "wall_s": 26.0, "replica_cpu_s": 30.0},
        {"arm": "router fast", "wall_s": 34.0, "replica_cpu_s": 30.0},
    ]
    m = medians(rows)
    assert m["fleetgen"]["wall_s"] == 20.0
    assert m["fleetgen"]["router_best_over_this"] == 1.5  # 30 (router fast's median) / 20
    assert m["fleetgen"]["router_best_cpu_over_this"] == 1.5
    assert m["router slow"]["router_best_over_this"] == 0.75
