"""Quota allocation, dedup, domains and language detection in isolation; the package's public API."""

from __future__ import annotations

import numpy as np
import pytest

import fleetgen.mix as mix
from fleetgen.errors import InputError
from fleetgen.mix.dedup import Signer, near_duplicates
from fleetgen.mix.domains import domain_from_labels, domain_from_text
from fleetgen.mix.lang import detect_language
from fleetgen.mix.quotas import allocate


def test_exports():
    assert sorted(mix.__all__) == sorted(
        [
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
    )
    for name in mix.__all__:
        assert getattr(mix, name) is not None


def test_allocation_rounds_to_the_exact_total():
    a = allocate(
        {"a": 1 / 3, "b": 1 / 3, "c": 1 / 3},
        {"a": 100, "b": 100, "c": 100},
        10,
        integer=True,
        on_shortfall="redistribute",
    )
    assert sorted(x.allocated for x in a) == [3, 3, 4] and sum(x.allocated for x in a) == 10


def test_allocation_redistributes_repeatedly_and_never_to_zero_shares():
    shares = {"a": 0.5, "b": 0.3, "c": 0.2, "d": 0.0}
    a = {
        x.domain: x
        for x in allocate(
            shares, {"a": 10, "b": 1000, "c": 25, "d": 1000}, 100, integer=True, on_shortfall="redistribute"
        )
    }
    # a gives 10 of 50; 40 split b:c = 3:2 -> c would get 36 but has 25; its surplus goes to b
    assert a["a"].allocated == 10 and a["c"].allocated == 25 and a["b"].allocated == 65 and a["d"].allocated == 0
    assert "short by 40" in a["a"].note and "redistributed" in a["b"].note


def test_allocation_error_and_shrink():
    with pytest.raises(InputError, match="a short by 5"):
        allocate({"a": 0.5, "b": 0.5}, {"a": 0, "b": 100}, 10, integer=True, on_shortfall="error")
    a = allocate({"a": 0.5, "b": 0.5}, {"a": 0, "b": 100}, 10, integer=True, on_shortfall="shrink")
    assert [x.allocated for x in a] == [0, 5]


def test_near_duplicates_cluster_to_the_earliest_member():
    s = Signer(64)
    base = "the committee will review every application submitted before the end of the month and reply by email"
    texts = [
        base,
        "an unrelated sentence about mountains rivers and the weather in the northern valleys today",
        "note: " + base,
        base + " thanks",
        "completely different words describing a recipe for bread with seeds",
    ]
    dup = near_duplicates(np.stack([s.sign(t) for t in texts]), 0.85)
    assert dup.tolist() == [-1, -1, 0, 0, -1]


@pytest.mark.parametrize(
    "text,lang",
    [
        ("What is the capital of France and why is it famous?", "en"),
        ("请解释一下光合作用的过程。", "zh"),
        ("Quelle est la capitale de la France et pourquoi est-elle célèbre ?", "fr"),
        ("```python\nprint(1)\n```", "und"),
        ("Wie ist das Wetter heute in Berlin und was soll ich anziehen?", "de"),
    ],
)
def test_language(text, lang):
    assert detect_language(text) == lang


def test_domains_labels_first_then_heuristics():
    assert domain_from_labels(["Problem solving and support", "Programming and software development"])[0] == "code"
    assert domain_from_labels(["Open knowledge Q&A"])[0] == "general"
    assert domain_from_labels([]) is None

    def u(t):
        return [{"role": "user", "content": t}]

    assert domain_from_text(u("Solve $x^2 = 4$"), None)[0] == "math"
    assert domain_from_text(u("Write a function in Python that reverses a list"), None)[0] == "code"
    assert (
        domain_from_text(u("What is the weather?"), [{"type": "function", "function": {"name": "w"}}])[0] == "tool_use"
    )
    assert domain_from_text(u("Why do electrons orbit the nucleus?"), None)[0] == "stem"
    assert domain_from_text(u("Meet me on 2024-05-02 at the cafe"), None)[0] == "general"
