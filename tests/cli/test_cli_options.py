"""Every flag that sets a config field takes its vocabulary and default from the field (issue 25).

The options are read from the click commands typer builds, and matched to fields through each command's
Binding (fleetgen.cli.app.bindings()): a new flag typed `str` over a Literal field, or a default copied by
hand that drifts from the model, fails here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fleetgen.cli.app import all_commands, app, bindings
from fleetgen.cli.field_table import literal_values

BINDINGS = bindings()

RUN = Path(__file__).parents[1] / "export" / "fixtures" / "smollm2-run"


def _bound():
    """(command, click param, binding, field) for every visible option or argument that sets a config field."""
    commands = all_commands()
    for command, binding in BINDINGS.items():
        for p in commands[command].params:
            field = binding.field_for(p.name)
            if field is not None and not p.hidden:
                yield command, p, binding, field


BOUND = list(_bound())
IDS = [f"{c}--{p.name}" for c, p, _, _ in BOUND]


def test_the_bindings_name_real_fields_and_cover_the_fixed_vocabularies():
    for command, binding in BINDINGS.items():
        for option, field in {**binding.field_of, **binding.derived}.items():
            assert binding.field_info(field) is not None, f"{command}: {option} -> {field}: no such field"
    fields = {(c, f) for c, _, _, f in BOUND}
    for needed in [
        ("generate", "reasoning"),
        ("generate", "truncation"),
        ("generate", "dispatch"),
        ("generate", "event_loop"),
        ("generate", "shard_runner"),
        ("generate", "history_reasoning"),
        ("generate", "tool_match"),
        ("export", "format"),
        ("export", "reasoning"),
        ("up", "engine"),
        ("doctor", "engine"),
    ]:
        assert needed in fields


@pytest.mark.parametrize(("command", "param", "binding", "field"), BOUND, ids=IDS)
def test_a_literal_field_s_flag_lists_exactly_its_words(command, param, binding, field):
    annotation = binding.field_info(field).annotation
    words = literal_values(annotation)
    if not words or field in binding.derived:
        return
    if field == "concurrency":  # int or auto: a number is no fixed vocabulary
        assert param.metavar == "auto|N"
        return
    assert param.metavar == "|".join(words), f"{command} {param.opts}: --help does not list {words}"


@pytest.mark.parametrize(("command", "param", "binding", "field"), BOUND, ids=IDS)
def test_an_option_s_default_is_its_field_s_default(command, param, binding, field):
    f = binding.field_info(field)
    if param.param_type_name == "argument" or param.required or param.name in binding.derived:
        return
    if param.name in binding.overrides:
        assert param.default is None, f"{command} --{param.name}: None means the file's value"
        return
    expected = f.get_default(call_default_factory=True)
    got = param.default
    if param.multiple and got is None:
        got = []  # an unset repeatable option is the field's empty list
    assert got == expected, (
        f"{command} {param.opts[0]}: default {got!r}, field {binding.model.__name__}.{field} {expected!r}"
    )


def test_help_lists_the_choices_and_groups_the_flags_by_section():
    out = CliRunner().invoke(app, ["generate", "--help"], env={"COLUMNS": "300"}).output
    assert "save|strip|off" in out and "least-outstanding|round-robin" in out
    for title, flags in (
        ("Sampling", ("--temperature ", "--profiles ")),
        ("Transport", ("--max-attempts ",)),
        ("Routing", ("--concurrency ", "--hedge ")),
        ("Observe", ("--metrics-port ",)),
        ("Sharding", ("--shard ", "--shards ", "--replica-slice", "--shard-runner")),
        ("Warmup", ("--warmup ", "--warmup-timeout-s")),
    ):
        start = out.index(f"╭─ {title} ")
        panel = out[start : out.index("╰", start)]
        for flag in flags:
            assert flag in panel and flag not in out[:start], (title, flag)
    assert "--lease-group" not in out  # set by --shards for each shard, never by hand
    export = CliRunner().invoke(app, ["export", "--help"], env={"COLUMNS": "300"}).output
    assert "--reasoning-in-data" in export and "train|context|drop" in export
    assert "--reasoning " not in export  # the old spelling is hidden


def test_a_word_outside_the_vocabulary_gets_the_config_s_one_line_error(tmp_path, capsys):
    from fleetgen.cli._errors import run_guarded

    with pytest.raises(SystemExit) as e:
        run_guarded(lambda: app(["export", str(RUN), "--format", "parquet", "-o", str(tmp_path / "x.jsonl")]))
    err = capsys.readouterr().err
    assert e.value.code == 2 and "format: Input should be 'specforge'" in err and "hint:" in err
    assert not (tmp_path / "x.jsonl").exists()


def _with_reasoning(tmp_path: Path) -> Path:
    """The committed SmolLM2 run with reasoning_content on every assistant turn."""
    src = tmp_path / "run"
    src.mkdir()
    rows = [json.loads(line) for line in (RUN / "results.jsonl").read_text().splitlines() if line.strip()]
    for row in rows:
        for m in row["messages"]:
            if m["role"] == "assistant":
                m["reasoning_content"] = "thinking it over"
    (src / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return src


def _reasoning_kept(out: Path) -> bool:
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    return any("reasoning_content" in m for r in rows for m in r["messages"])


def test_export_reasoning_is_renamed_and_the_old_spelling_still_works_with_a_note(tmp_path):
    src = _with_reasoning(tmp_path)
    base = ["export", str(src), "--format", "openai"]
    r = CliRunner().invoke(app, [*base, "-o", str(tmp_path / "kept.jsonl")])
    assert r.exit_code == 0, r.output
    assert _reasoning_kept(tmp_path / "kept.jsonl")  # the default: train
    r = CliRunner().invoke(app, [*base, "--reasoning-in-data", "drop", "-o", str(tmp_path / "new.jsonl")])
    assert r.exit_code == 0 and "note:" not in r.output, r.output
    assert not _reasoning_kept(tmp_path / "new.jsonl")
    r = CliRunner().invoke(app, [*base, "--reasoning", "drop", "-o", str(tmp_path / "old.jsonl")])
    assert r.exit_code == 0, r.output
    assert not _reasoning_kept(tmp_path / "old.jsonl")
    assert "--reasoning is now --reasoning-in-data" in r.output
    r = CliRunner().invoke(
        app, [*base, "--reasoning", "drop", "--reasoning-in-data", "context", "-o", str(tmp_path / "x.jsonl")]
    )
    assert r.exit_code != 0 and not (tmp_path / "x.jsonl").exists()
