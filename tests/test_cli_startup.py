"""The CLI starts without the libraries only a running command needs (issue 26: an instant CLI).

A command's module is imported only when that command runs or shows its own help (`fleetgen --help`
lists the commands from `fleetgen.cli.app.COMMANDS`); no command imports at start the machinery behind
it: aiohttp (its import builds SSL contexts), the journal, the launcher, psutil, pyarrow, transformers.
Checked through `sys.modules` of a fresh interpreter, never by timing.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# Libraries (and fleetgen modules) a start-up must not load; each costs tens of ms or more.
HEAVY = (
    "aiohttp",
    "psutil",
    "numpy",
    "pyarrow",
    "transformers",
    "torch",
    "datasketch",
    "scipy",
    "matplotlib",
    "uvloop",
    "rich.live",
    "rich.progress",
    "fleetgen.fleet.launcher",
    "fleetgen.fleet.local",
    "fleetgen.fleet.status",
    "fleetgen.generate.runner",
    "fleetgen.generate.journal.directory",
    "fleetgen.doctor.run",
    "fleetgen.export.run",
    "fleetgen.mix.build",
    "fleetgen.run.pipeline",
)
# The other commands' modules (and the config tree `generate` builds its options from; `up`'s twenty options).
OTHER_COMMANDS = (
    "fleetgen.cli.up",
    "fleetgen.cli.generate",
    "fleetgen.cli.doctor",
    "fleetgen.cli.mix",
    "fleetgen.cli.export",
    "fleetgen.cli.run",
    "fleetgen.generate.config",
)


def _modules_after(code: str, tmp_path) -> set[str]:
    """Run `code` in a fresh interpreter; the modules it left loaded."""
    out = tmp_path / "modules.json"
    script = (
        "import json, sys\n"
        f"try:\n    {code}\nexcept SystemExit:\n    pass\n"
        f"json.dump(sorted(sys.modules), open({str(out)!r}, 'w'))\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True)
    return set(json.loads(out.read_text()))


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in HEAVY if m in modules)


def test_importing_the_app_loads_no_command_machinery(tmp_path):
    modules = _modules_after("import fleetgen.cli.app", tmp_path)
    assert "fleetgen.cli.app" in modules
    assert _heavy(modules) == []
    assert [m for m in OTHER_COMMANDS if m in modules] == []


def test_root_help_imports_no_command_module(tmp_path):
    modules = _modules_after("from fleetgen.cli.app import app; app(['--help'])", tmp_path)
    assert "typer" in modules
    assert (
        sorted(
            m
            for m in modules
            if m.startswith("fleetgen.cli.") and m != "fleetgen.cli.app" and not m.startswith("fleetgen.cli._")
        )
        == []
    )


def test_the_command_table_matches_the_commands():
    """`fleetgen --help` reads COMMANDS; each summary must be what the command itself says."""
    from fleetgen.cli.app import COMMANDS, all_commands

    commands = all_commands()
    assert set(commands) == set(COMMANDS)
    for name, cmd in commands.items():
        assert (cmd.help or "").strip().splitlines()[0] == COMMANDS[name].summary, name


def test_a_typo_suggests_a_command_not_yet_loaded():
    from typer.testing import CliRunner

    from fleetgen.cli.app import app

    out = CliRunner().invoke(app, ["genrate"])
    assert out.exit_code == 2 and "generate" in out.output


@pytest.mark.parametrize("argv", [["--help"], ["generate", "--help"], ["up", "--help"], ["export", "--help"]])
def test_help_loads_no_command_machinery(tmp_path, argv):
    modules = _modules_after(f"from fleetgen.cli.app import app; app({argv!r})", tmp_path)
    assert "typer" in modules
    assert _heavy(modules) == []


def test_generate_help_builds_its_flags_from_the_table_not_the_config_models(tmp_path):
    """Every field of generate's sections is a flag (cli/_options.py), read from cli/_fields.py: no pydantic."""
    modules = _modules_after("from fleetgen.cli.app import app; app(['generate', '--help'])", tmp_path)
    assert "fleetgen.cli.generate" in modules and "fleetgen.cli._fields" in modules
    assert [m for m in ("pydantic", "fleetgen.generate.config", "fleetgen.config") if m in modules] == []


# What `status` and `down` of no fleet need not load either: they read the state file as plain JSON, and
# their options' defaults and help come from cli/_fields.py, not the config models.
NO_FLEET_HEAVY = ("pydantic", "yaml", "fleetgen.fleet.state", "fleetgen.fleet.config")


def test_down_of_no_fleet_loads_no_models_nor_http_client(tmp_path):
    state = tmp_path / "fleet"
    modules = _modules_after(f"from fleetgen.cli.app import app; app(['down', '--state', {str(state)!r}])", tmp_path)
    assert "fleetgen.fleet.stop" in modules  # it ran
    assert _heavy(modules) == []
    assert [m for m in (*NO_FLEET_HEAVY, "rich.console") if m in modules] == []  # its one line goes out plain
    assert [m for m in OTHER_COMMANDS if m in modules] == []


def test_status_of_no_fleet_loads_no_models_nor_probes(tmp_path):
    state = tmp_path / "fleet"
    argv = ["fleetgen", "status", "--state", str(state)]
    modules = _modules_after(f"sys.argv = {argv!r}; from fleetgen.cli.app import main; main()", tmp_path)
    assert "fleetgen.fleet.state_file" in modules  # it ran, found no fleet, and said so (through rich)
    assert _heavy(modules) == []
    assert [m for m in (*NO_FLEET_HEAVY, "fleetgen.fleet.status") if m in modules] == []


def test_status_of_a_fleet_loads_no_http_client(tmp_path):
    """status probes with http.client: no aiohttp (nor the launcher) even when it checks a replica."""
    from fleetgen.fleet.net import free_port
    from fleetgen.fleet.state import FleetState, ReplicaState, ensure_state_dir, write_state

    state = ensure_state_dir(tmp_path / "fleet")
    dead = ReplicaState(
        index=0,
        endpoint=f"http://127.0.0.1:{free_port('127.0.0.1')}",
        pid=2**22 + 1,
        create_time=0.0,
        engine="vllm",
        model="m",
        served_model_name="m",
        log_path=str(state / "logs" / "0.log"),
        command=["vllm"],
    )
    write_state(state, FleetState(engine="vllm", model="m", served_model_name="m", replicas=[dead]))
    argv = ["fleetgen", "status", "--state", str(state)]
    modules = _modules_after(f"sys.argv = {argv!r}; from fleetgen.cli.app import main; main()", tmp_path)
    assert "fleetgen.fleet.status" in modules  # it probed the replica
    assert _heavy([m for m in modules if m not in ("psutil", "fleetgen.fleet.status", "fleetgen.fleet.local")]) == []
    assert [m for m in OTHER_COMMANDS if m in modules] == []


def test_help_still_shows_the_config_field_descriptions():
    from typer.testing import CliRunner

    from fleetgen.cli.app import app
    from fleetgen.fleet.config import FleetConfig

    out = CliRunner().invoke(app, ["up", "--help"], env={"COLUMNS": "400"}).output
    first_words = " ".join(FleetConfig.model_fields["replicas_per_gpu"].description.split()[:4])
    # The help may be wrapped to the width rich saw first (80 without a terminal): read it without the box.
    assert first_words in " ".join(out.replace("\u2502", " ").split())
