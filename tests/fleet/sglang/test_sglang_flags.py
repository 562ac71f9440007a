"""Every sglang command line fleetgen builds parses with SGLang 0.5.12's own argument parser.

The parser runs in .venv-sglang (scripts/setup-sglang.sh) through src/fleetgen/fleet/engines/sglang_flags.py; all
command lines of the session are checked in one call (importing sglang takes ~10 s of CPU).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetgen.errors import EngineError
from fleetgen.fleet import local
from fleetgen.fleet.config import FleetConfig
from fleetgen.fleet.engines import ReplicaSpec, get_engine
from fleetgen.fleet.engines.sglang_validate import (
    DEFAULT_PYTHON,
    Verdicts,
    check_command_lines,
    raise_for_rejected,
    sglang_python,
    validate_command_lines,
)
from fleetgen.fleet.engines.sglang_versions import flag_notes, version_tuple
from fleetgen.fleet.replica_plan import plan_replicas
from fleetgen.fleet.spawn import redact
from fleetgen.gpu_info import GpuInfo

SEED_ARGS = [
    "--reasoning-parser",
    "qwen3",
    "--attention-backend",
    "flashinfer",
    "--mem-fraction-static",
    "0.85",
    "--chunked-prefill-size",
    "4096",
    "--mamba-scheduler-strategy",
    "extra_buffer",
    "--mamba-ssm-dtype",
    "bfloat16",
]
SECRET = "sk-test-not-a-real-key"


def _have_sglang() -> str | None:
    try:
        sglang_python()
    except EngineError as e:
        return str(e)
    return None


needs_sglang = pytest.mark.skipif(_have_sglang() is not None, reason=f"{_have_sglang()} (run scripts/setup-sglang.sh)")
if _have_sglang():
    print(f"SKIP sglang parser tests: {_have_sglang()}")


def spec(**kw) -> ReplicaSpec:
    base = dict(
        index=0,
        model="/models/Qwen3.6-27B",
        served_model_name="qwen36",
        host="127.0.0.1",
        port=30000,
        gpus=(0,),
        cache_dir=Path("/tmp/fleetgen-cache/sglang-replica-0"),
    )
    base.update(kw)
    return ReplicaSpec(**base)


def seed_commands(monkeypatch, tmp_path) -> list[list[str]]:
    """The seed job's 8 replicas, planned by fleetgen's real planner on a pretend 8-GPU node."""
    fake = [GpuInfo(i, "NVIDIA RTX PRO 6000", 96 << 30, (12, 0)) for i in range(8)]
    monkeypatch.setattr(local, "discover_gpus", lambda: fake)
    config = FleetConfig(
        engine="sglang",
        model="/models/Qwen3.6-27B",
        served_model_name="qwen36",
        gpus="all",
        tp=1,
        max_running_requests=64,
        context_length=8192,
        engine_args=SEED_ARGS,
        state_dir=tmp_path,
        tool_call_parser="qwen3_coder",
    )
    specs = plan_replicas(config, "/models/Qwen3.6-27B", local.LocalBackend())
    assert len(specs) == 8
    eng = get_engine("sglang")
    return [eng.command(s, "python") for s in specs]


VARIANTS = {
    "minimal": spec(),
    "tp4": spec(tp=4, gpus=(0, 1, 2, 3)),
    "max_running": spec(max_running_requests=64),
    "context": spec(context_length=8192),
    "eager": spec(enforce_eager=True),
    "api_key": spec(api_key=SECRET),
    "tool_parser": spec(tool_call_parser="qwen3_coder"),
    "tool_parser_in_extra": spec(tool_call_parser="qwen3_coder", extra_args=("--tool-call-parser", "qwen3_coder")),
    "extra": spec(extra_args=("--dtype", "bfloat16", "--kv-cache-dtype=fp8_e4m3", "--enable-cache-report")),
    "metrics_given": spec(extra_args=("--enable-metrics",)),
    "prefix_cache_on": spec(prefix_cache=True),
    "radix_off_given": spec(extra_args=("--disable-radix-cache",)),
    "tp_in_extra": spec(tp=2, gpus=(0, 1), extra_args=("--tensor-parallel-size", "2")),
    "everything": spec(
        tp=2,
        gpus=(2, 3),
        port=30007,
        max_running_requests=64,
        context_length=8192,
        enforce_eager=True,
        api_key=SECRET,
        extra_args=tuple(SEED_ARGS),
    ),
}


BAD = {
    "unknown flag": spec(extra_args=("--enable-ep-moe-typo",)),
    "bad choice": spec(extra_args=("--attention-backend", "fa9")),
    "bad type": spec(extra_args=("--mem-fraction-static", "lots")),
    "bad mamba choice": spec(extra_args=("--mamba-scheduler-strategy", "extra-buffer")),
    "typo in replica 1": spec(index=1, extra_args=("--max-runing-requests", "64")),
    "deprecated": spec(extra_args=("--enable-piecewise-cuda-graph",)),
    "bad tool parser": spec(tool_call_parser="qwen3-coder"),
}


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    """One call to SGLang's parser for every command line of this module."""
    if _have_sglang():
        pytest.skip(_have_sglang())
    mp = pytest.MonkeyPatch()
    try:
        seed = seed_commands(mp, tmp_path_factory.mktemp("seed"))
    finally:
        mp.undo()
    eng = get_engine("sglang")
    good = {name: eng.command(s, "python") for name, s in VARIANTS.items()}
    bad = {name: eng.command(s, "python") for name, s in BAD.items()}
    argvs = list(good.values()) + seed + list(bad.values())
    v = check_command_lines(argvs)
    results = dict(zip(list(good) + [f"seed-{i}" for i in range(len(seed))] + list(bad), v.results))
    return v.version, results, seed


@needs_sglang
def test_parser_is_sglang_0_5_12(verdicts):
    assert verdicts[0] == "0.5.12"


@needs_sglang
@pytest.mark.parametrize("name", list(VARIANTS))
def test_every_variant_parses_with_sglangs_parser(verdicts, name):
    r = verdicts[1][name]
    assert r.ok, r.error
    assert r.deprecated == []


@needs_sglang
def test_seed_job_8_replicas_parse_with_distinct_ports(verdicts):
    _, results, seed = verdicts
    for i in range(8):
        assert results[f"seed-{i}"].ok, results[f"seed-{i}"].error
    ports = {c[c.index("--port") + 1] for c in seed}
    nccl = {c[c.index("--nccl-port") + 1] for c in seed}
    assert len(ports) == 8 and len(nccl) == 8 and not ports & nccl
    for flag, value in zip(SEED_ARGS[::2], SEED_ARGS[1::2]):
        assert all(c[c.index(flag) + 1] == value for c in seed), flag
    assert all(c[c.index("--max-running-requests") + 1] == "64" for c in seed)
    assert all(c[c.index("--context-length") + 1] == "8192" for c in seed)
    assert all(c[c.index("--tool-call-parser") + 1] == "qwen3_coder" for c in seed)  # Qwen3.6's XML tool calls


def test_tool_call_parser_is_passed_once():
    eng = get_engine("sglang")
    assert eng.command(spec(tool_call_parser="qwen3_coder"), "py").count("--tool-call-parser") == 1
    told = eng.command(spec(tool_call_parser="qwen3_coder", extra_args=("--tool-call-parser", "qwen3_coder")), "py")
    assert told.count("--tool-call-parser") == 1
    assert "--tool-call-parser" not in eng.command(spec(), "py")


@needs_sglang
@pytest.mark.parametrize(
    "name,expected",
    [
        ("unknown flag", "unrecognized arguments: --enable-ep-moe-typo"),
        ("bad choice", "argument --attention-backend: invalid choice: 'fa9'"),
        ("bad type", "argument --mem-fraction-static: invalid float value: 'lots'"),
        ("bad mamba choice", "argument --mamba-scheduler-strategy: invalid choice: 'extra-buffer'"),
        ("bad tool parser", "argument --tool-call-parser: invalid choice: 'qwen3-coder'"),
    ],
)
def test_wrong_flags_are_rejected_by_sglangs_parser(verdicts, name, expected):
    r = verdicts[1][name]
    assert not r.ok
    assert expected in r.error


@needs_sglang
def test_a_wrong_flag_is_a_clear_engine_error_before_launch(verdicts):
    version, results, _ = verdicts
    with pytest.raises(EngineError) as err:
        raise_for_rejected(Verdicts(version, [results["minimal"], results["typo in replica 1"]]))
    msg = str(err.value)
    assert "sglang 0.5.12 rejects replica 1's command line: unrecognized arguments: --max-runing-requests" in msg
    assert "engine_args" in err.value.hint


@needs_sglang
def test_deprecated_flags_are_reported(verdicts):
    r = verdicts[1]["deprecated"]
    assert r.ok and r.deprecated == ["--enable-piecewise-cuda-graph"]
    assert any("deprecated in sglang 0.5.12" in n for n in r.notes)


def test_missing_sglang_python_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("FLEETGEN_SGLANG_PYTHON", str(tmp_path / "nope" / "python"))
    with pytest.raises(EngineError, match="no python with sglang at .*nope/python") as err:
        validate_command_lines([["--model-path", "/m"]])
    assert "setup-sglang.sh" in err.value.hint


def test_flags_owned_by_fleetgen_cannot_be_passed_through():
    with pytest.raises(EngineError, match="--port"):
        get_engine("sglang").command(spec(extra_args=("--port", "1234")), "py")


def test_version_history_explains_flags_missing_from_older_versions():
    assert version_tuple("0.5.12.post1") == (0, 5, 12)
    assert version_tuple("0.5.6rc1") == (0, 5, 6)
    notes = flag_notes(SEED_ARGS, "0.5.6")
    assert notes == ["--mamba-scheduler-strategy is not in sglang 0.5.6 (absent in 0.5.6, present in 0.5.12)"]
    assert flag_notes(SEED_ARGS, "0.5.12") == []


def test_api_key_is_on_argv_only_and_redacted_in_state_record():
    eng = get_engine("sglang")
    s = spec(api_key=SECRET)
    cmd = eng.command(s, "py")
    assert cmd[cmd.index("--api-key") + 1] == SECRET
    assert SECRET not in " ".join(redact(cmd, SECRET))
    assert SECRET not in repr(eng.environment(s))


def test_replica_isolation_env():
    eng = get_engine("sglang")
    env0 = eng.environment(spec(gpus=(0, 1), cache_dir=Path("/c/sglang-replica-0")))
    env1 = eng.environment(spec(index=1, gpus=(2, 3), cache_dir=Path("/c/sglang-replica-1")))
    assert env0["CUDA_VISIBLE_DEVICES"] == "0,1" and env1["CUDA_VISIBLE_DEVICES"] == "2,3"
    for key in ("TVM_FFI_CACHE_DIR", "SGLANG_DG_CACHE_DIR"):
        assert env0[key] != env1[key]
        assert env0[key].startswith("/c/sglang-replica-0/")
    # flashinfer's workspace holds absolute paths (a copy rebuilds everything) and locks each build: shared.
    assert env0["FLASHINFER_WORKSPACE_BASE"] == env1["FLASHINFER_WORKSPACE_BASE"] == "/c/sglang-shared/flashinfer"


def test_default_python_location_is_the_repo_venv():
    assert DEFAULT_PYTHON.parts[-3:] == (".venv-sglang", "bin", "python")
