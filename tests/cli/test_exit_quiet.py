"""A command's last line is its own: nothing after it at exit (issue 43).

`main()` freezes the garbage collector before the process ends (a fast exit); triton's bindings,
loaded with torch by a tokenizer or model load, then report every object they still see at the
interpreter's teardown: ~30 lines of `nanobind: leaked ...` after the command's output. The `fleetgen`
command (console_main) skips that teardown. Real triton, not a stand-in: it is what printed them.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

SCRIPT = "import sys, triton; sys.argv = ['fleetgen', '--help']; from fleetgen.cli.app import {fn}; {fn}()"


@pytest.fixture(autouse=True)
def _need_triton():
    pytest.importorskip("triton")


def run(fn: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", SCRIPT.format(fn=fn)], capture_output=True, text=True, timeout=120)


def test_the_console_command_ends_on_its_own_last_line():
    proc = run("console_main")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "" and "Commands" in proc.stdout  # the help, and nothing after it


def test_without_it_the_teardown_prints_after_the_output():
    """The check above can fail: the same command through main() alone prints the leak report."""
    proc = run("main")
    assert "nanobind: leaked" in proc.stderr


def test_the_exit_status_is_kept():
    proc = subprocess.run(
        [sys.executable, "-m", "fleetgen.cli.app", "report", "/nonexistent/dir"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "results directory not found" in proc.stderr
