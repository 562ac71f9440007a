"""Whether a prompt's recorded license allows commercial use: `yes`, `no` or `unknown`, never a guess.

A license fleetgen does not know (or none at all: a local file, a dataset card without one) is
`unknown`, not `yes`: the mix report says so, and a recipe can refuse such prompts
(`filters.exclude_unknown_license`) or keep only the licenses it lists (`filters.require_license`).
The names are the Hugging Face dataset card's `license:` identifiers, compared case-insensitively.
"""

from __future__ import annotations

from typing import Literal

CommercialUse = Literal["yes", "no", "unknown"]

UNKNOWN = "unknown"  # what a prompt records when neither the recipe nor the adapter knows its license

# Licenses that allow commercial use (with attribution or share-alike terms, which a user still owes).
PERMISSIVE = frozenset(
    {
        "apache-2.0",
        "mit",
        "bsd",
        "bsd-2-clause",
        "bsd-3-clause",
        "isc",
        "cc0-1.0",
        "unlicense",
        "cc-by-4.0",
        "cc-by-3.0",
        "cc-by-sa-4.0",
        "cc-by-sa-3.0",
        "odc-by",
        "odbl",
        "pddl",
        "cdla-permissive-2.0",
        "cdla-permissive-1.0",
        "cdla-sharing-1.0",
        "mpl-2.0",
        "lgpl-3.0",
        "gpl-3.0",
        "artistic-2.0",
    }
)
NONCOMMERCIAL_MARKERS = ("-nc", "noncommercial", "non-commercial")


def commercial_use(license_name: str | None) -> CommercialUse:
    """`no` for a non-commercial license, `yes` for a known one that allows it, else `unknown`."""
    lic = (license_name or "").strip().lower()
    if any(m in lic for m in NONCOMMERCIAL_MARKERS):
        return "no"
    if lic in PERMISSIVE:
        return "yes"
    return "unknown"
