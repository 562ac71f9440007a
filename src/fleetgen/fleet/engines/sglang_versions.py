"""Which SGLang flags exist in which versions: notes that explain a rejected or no-op flag."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class FlagHistory:
    """A flag that exists in some SGLang versions only; checked against the target's version."""

    flag: str
    seen_in: str  # a version whose parser has it
    absent_in: str | None = None  # an older version whose parser lacks it
    deprecated_in: str | None = None  # a version whose parser keeps it only as a no-op
    replacement: str | None = None


# Each entry was read from the named versions' sglang/srt/server_args.py.
FLAG_HISTORY: tuple[FlagHistory, ...] = (
    FlagHistory("--mamba-scheduler-strategy", seen_in="0.5.12", absent_in="0.5.6"),
    FlagHistory("--disable-piecewise-cuda-graph", seen_in="0.5.12", absent_in="0.5.6"),
    FlagHistory("--enforce-piecewise-cuda-graph", seen_in="0.5.12", absent_in="0.5.6"),
    FlagHistory(
        "--enable-piecewise-cuda-graph",
        seen_in="0.5.6",
        deprecated_in="0.5.12",
        replacement="nothing: piecewise CUDA graphs are on by default (--disable-piecewise-cuda-graph turns them off)",
    ),
    FlagHistory(
        "--hybrid-kvcache-ratio", seen_in="0.5.6", deprecated_in="0.5.12", replacement="--swa-full-tokens-ratio"
    ),
    FlagHistory(
        "--collect-tokens-histogram",
        seen_in="0.5.6",
        deprecated_in="0.5.12",
        replacement="nothing: --enable-metrics collects token histograms",
    ),
)


def version_tuple(version: str) -> tuple[int, ...]:
    """'0.5.12.post1' -> (0, 5, 12); non-numeric parts end the tuple."""
    parts: list[int] = []
    for piece in version.split("."):
        m = re.match(r"\d+", piece)
        if not m:
            break
        parts.append(int(m.group()))
        if m.group() != piece:
            break
    return tuple(parts)


def flag_notes(args: list[str], version: str) -> list[str]:
    """Why flags in `args` do not fit SGLang `version`: one sentence per flag, empty when all fit."""
    v = version_tuple(version)
    notes = []
    for h in FLAG_HISTORY:
        if not any(a == h.flag or a.startswith(h.flag + "=") for a in args):
            continue
        if h.absent_in and v and v <= version_tuple(h.absent_in):
            notes.append(f"{h.flag} is not in sglang {version} (absent in {h.absent_in}, present in {h.seen_in})")
        elif h.deprecated_in and v and v >= version_tuple(h.deprecated_in):
            notes.append(f"{h.flag} is deprecated in sglang {h.deprecated_in} (a no-op); use {h.replacement}")
    return notes
