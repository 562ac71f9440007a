"""The generate summary written to a log or a pipe (no terminal) is whole, not cut to 80 columns.

Seen on the H200: `fleetgen generate ... 2>log` printed `repli…` and `12895…` for `replica 0` and
the output tok/s.
"""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from fleetgen.cli import generate as cli_generate
from fleetgen.generate import Stats
from fleetgen.generate.observe.stats import ReplicaStats


def _stats() -> Stats:
    s = Stats(total=1000, ok=1000, truncated=998, completion_tokens=63942, started=0.0, finished=4.9586)
    r = ReplicaStats(index=0, endpoint="http://127.0.0.1:30000", window=256)
    r.requests, r.ok, r.completion_tokens = 1000, 1000, 63942
    s.replicas = [r]
    return s


def test_summary_to_a_file_is_not_cropped(monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(cli_generate, "console", Console(file=out, width=80, force_terminal=False))
    s = _stats()
    cli_generate.print_summary(s, Path("/tmp/gen"))
    text = out.getvalue()
    assert "…" not in text
    assert "replica 0" in text
    assert f"{s.output_tokens_per_s:.1f}" in text
    assert "truncated" in text and "requests" in text and "failures" in text


def test_summary_on_a_terminal_still_fits_it(monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(cli_generate, "console", Console(file=out, width=60, force_terminal=True, color_system=None))
    cli_generate.print_summary(_stats(), Path("/tmp/gen"))
    assert max(len(line) for line in out.getvalue().splitlines()) <= 60
