"""The README's stage-by-stage walk runs on the CPU setup, command by command, as written (issue 43).

The commands are read from README.md (the bash block after `<!-- readme-test: cpu-walk -->`), so
the README and this test cannot drift apart. They run in a temporary directory holding `examples/`
(a link to the repository's), with the venv's `fleetgen` first on PATH (what `source
.venv/bin/activate` does), against a real vLLM-CPU replica. One thing is added to one command:
`fleetgen up` gets `--port-base` of free ports, so it cannot meet another fleet on this machine
(the README leaves the default, 30000).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from real_fleet import engine_available, free_port_base

from fleetgen.fleet import down

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
MARKER = "<!-- readme-test: cpu-walk -->"
STAGES = ["doctor", "mix", "up", "status", "generate", "down", "export", "export", "capture", "report", "plan"]


def cpu_walk() -> list[str]:
    """The walk's command lines, without their comments (a `#` after two spaces)."""
    text = README.read_text(encoding="utf-8")
    assert MARKER in text, f"README.md lost its {MARKER} marker"
    block = text.split(MARKER, 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [line.split("  #", 1)[0].strip() for line in block.splitlines()]
    return [c for c in commands if c and not c.startswith("#")]


def test_the_walk_covers_every_stage_and_needs_no_gpu():
    commands = cpu_walk()
    assert commands[0] == "source .venv/bin/activate"
    assert [c.split()[1] for c in commands[1:]] == STAGES
    assert not [c for c in commands if "sglang" in c or "--gpus all" in c]


@pytest.mark.engine
def test_every_cpu_command_of_the_readme_runs(tmp_path):
    why = engine_available()
    if why:
        pytest.skip(f"real engine unavailable: {why}")
    bin_dir = Path(sys.executable).parent
    if not (bin_dir / "fleetgen").exists():
        pytest.skip(f"no fleetgen script beside {sys.executable}: the walk runs the installed command")
    (tmp_path / "examples").symlink_to(REPO / "examples")
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    state = tmp_path / ".fleetgen" / "fleet"
    try:
        for command in cpu_walk()[1:]:
            if command.startswith("fleetgen up "):
                command += f" --port-base {free_port_base(1, 25000)}"
            proc = subprocess.run(
                command, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
            )
            assert proc.returncode == 0, f"`{command}` exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    finally:
        if (state / "state.json").exists():
            down(state, grace_s=5)

    work = tmp_path / "work"
    prompts = work / "prompts.jsonl"
    assert len(prompts.read_text().splitlines()) == 40
    results = [json.loads(line) for line in (work / "out" / "results.jsonl").read_text().splitlines()]
    assert len(results) == 80 and all(r["token_ids"] for r in results)
    assert list(work.glob("train*.jsonl")) and (work / "tokens.parquet").stat().st_size > 0
    report = work / "out" / "report"
    assert (report / "report.md").exists() and (report / "report.html").exists()
