"""Command lines, log reading and metrics parsing of each engine, without starting a server."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetgen.errors import ConfigError
from fleetgen.fleet.config import FleetConfig
from fleetgen.fleet.devices import cpu_shares, gpu_groups
from fleetgen.fleet.engines import Phase, ReplicaSpec, get_engine
from fleetgen.fleet.engines import vllm as vllm_engine
from fleetgen.fleet.engines.cpu_dtype import bf16_is_slow, cpu_flags
from fleetgen.fleet.local import LocalBackend
from fleetgen.fleet.probe import compare_configs
from fleetgen.fleet.replica_plan import plan_replicas


def spec(**kw) -> ReplicaSpec:
    base = dict(index=0, model="/m", served_model_name="m", host="127.0.0.1", port=30000)
    base.update(kw)
    return ReplicaSpec(**base)


def flag(cmd: list[str], name: str) -> str:
    return cmd[cmd.index(name) + 1]


def test_vllm_command_pins_port_model_and_passes_extra_args_verbatim():
    eng = get_engine("vllm")
    cmd = eng.command(
        spec(port=30003, max_running_requests=64, context_length=4096, extra_args=("--dtype", "bfloat16", "--foo=1")),
        "py",
    )
    assert cmd[:3] == ["py", "-m", "vllm.entrypoints.openai.api_server"]
    assert flag(cmd, "--port") == "30003"
    assert flag(cmd, "--model") == "/m"
    assert flag(cmd, "--max-num-seqs") == "64"
    assert flag(cmd, "--max-model-len") == "4096"
    assert cmd[-3:] == ["--dtype", "bfloat16", "--foo=1"]
    assert "--tensor-parallel-size" not in cmd


def test_vllm_cpu_disables_chunked_prefill_unless_told():
    eng = get_engine("vllm")
    assert "--no-enable-chunked-prefill" in eng.command(spec(), "py")
    assert "--no-enable-chunked-prefill" not in eng.command(spec(gpus=(0,)), "py")
    told = eng.command(spec(extra_args=("--enable-chunked-prefill",)), "py")
    assert "--no-enable-chunked-prefill" not in told


def test_vllm_tp_and_gpu_pinning_go_to_flags_and_environment():
    eng = get_engine("vllm")
    s = spec(gpus=(2, 3), tp=2)
    assert flag(eng.command(s, "py"), "--tensor-parallel-size") == "2"
    env = eng.environment(s)
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert "VLLM_CPU_KVCACHE_SPACE" not in env


def test_vllm_cpu_replica_gets_its_cores_and_kv_space():
    env = get_engine("vllm").environment(spec(cpus=(4, 5), cpu_kv_cache_gb=1.5))
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "4,5"
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "1.5"
    assert "CUDA_VISIBLE_DEVICES" not in env


def test_vllm_tool_call_parser_brings_auto_tool_choice():
    eng = get_engine("vllm")
    cmd = eng.command(spec(tool_call_parser="qwen3_coder"), "py")
    assert flag(cmd, "--tool-call-parser") == "qwen3_coder" and cmd.count("--enable-auto-tool-choice") == 1
    told = eng.command(
        spec(tool_call_parser="hermes", extra_args=("--enable-auto-tool-choice", "--tool-call-parser=hermes")), "py"
    )
    assert told.count("--enable-auto-tool-choice") == 1 and "--tool-call-parser" not in told
    plain = eng.command(spec(), "py")
    assert "--enable-auto-tool-choice" not in plain and "--tool-call-parser" not in plain
    assert eng.fatal_of("KeyError: 'invalid tool call parser: qwen3-coder (chose from { hermes })'") is not None


@pytest.mark.engine
def test_vllm_tool_call_flags_parse_with_vllms_own_parser_and_name_a_registered_parser():
    """vLLM 0.32's serve parser and validator accept the flags; its registry has the parser names we document."""
    import subprocess
    import sys

    eng = get_engine("vllm")
    argvs = [eng.command(spec(tool_call_parser=name), "py")[3:] for name in ("qwen3_coder", "hermes")]
    code = (
        "import json, sys\n"
        "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
        "from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args\n"
        "from vllm.tool_parsers import ToolParserManager\n"
        "p = make_arg_parser(FlexibleArgumentParser())\n"
        "out = []\n"
        "for argv in json.loads(sys.argv[1]):\n"
        "    a = p.parse_args(argv); validate_parsed_serve_args(a)\n"
        "    out.append([a.enable_auto_tool_choice, a.tool_call_parser, a.tool_call_parser in "
        "ToolParserManager.list_registered()])\n"
        "print('RESULT', json.dumps(out))\n"
    )
    import json

    r = subprocess.run([sys.executable, "-c", code, json.dumps(argvs)], capture_output=True, text=True, timeout=300)
    line = next((x for x in r.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line, r.stderr[-2000:]
    assert json.loads(line[len("RESULT ") :]) == [[True, "qwen3_coder", True], [True, "hermes", True]]


def test_vllm_api_key_goes_to_environment_not_argv():
    eng = get_engine("vllm")
    s = spec(api_key="s3cret")
    assert "s3cret" not in " ".join(eng.command(s, "py"))
    assert eng.environment(s)["VLLM_API_KEY"] == "s3cret"


def test_sglang_command_has_distinct_nccl_ports_and_tp():
    eng = get_engine("sglang")
    a = eng.command(spec(port=30000, gpus=(0, 1), tp=2), "py")
    b = eng.command(spec(index=1, port=30001, gpus=(2, 3), tp=2), "py")
    assert a[:3] == ["py", "-m", "sglang.launch_server"]
    assert flag(a, "--model-path") == "/m"
    assert flag(a, "--tp-size") == "2"
    assert flag(a, "--nccl-port") != flag(b, "--nccl-port")
    assert "--enable-metrics" in a


def test_sglang_fleets_run_without_the_radix_cache_unless_asked():
    eng = get_engine("sglang")
    assert eng.command(spec(), "py").count("--disable-radix-cache") == 1
    assert eng.command(spec(prefix_cache=False), "py").count("--disable-radix-cache") == 1
    assert "--disable-radix-cache" not in eng.command(spec(prefix_cache=True), "py")
    given = eng.command(spec(extra_args=("--disable-radix-cache",)), "py")
    assert given.count("--disable-radix-cache") == 1


def test_vllm_prefix_caching_follows_the_setting_and_defaults_to_the_engine():
    eng = get_engine("vllm")
    assert not [a for a in eng.command(spec(), "py") if "prefix-caching" in a]
    assert "--no-enable-prefix-caching" in eng.command(spec(prefix_cache=False), "py")
    assert "--enable-prefix-caching" in eng.command(spec(prefix_cache=True), "py")
    given = eng.command(spec(prefix_cache=False, extra_args=("--enable-prefix-caching",)), "py")
    assert [a for a in given if "prefix-caching" in a] == ["--enable-prefix-caching"]


def test_unknown_engine_is_a_config_error():
    with pytest.raises(ConfigError, match="unknown engine"):
        get_engine("tgi")


def test_gpu_groups_split_consecutively_and_check_counts():
    assert gpu_groups("all", 1, None, [0, 1, 2, 3]) == [(0,), (1,), (2,), (3,)]
    assert gpu_groups("all", 2, None, [0, 1, 2, 3]) == [(0, 1), (2, 3)]
    assert gpu_groups("4,5,6,7", 2, 1, list(range(8))) == [(4, 5)]
    with pytest.raises(ConfigError, match="needs 6 GPUs"):
        gpu_groups("all", 2, 3, [0, 1, 2, 3])
    with pytest.raises(ConfigError, match=r"GPU\(s\) \[9\]"):
        gpu_groups("0,9", 1, None, [0, 1])


def test_cpu_shares_are_disjoint_when_cores_suffice():
    assert cpu_shares(2, [0, 1, 2, 3]) == [(0, 1), (2, 3)]
    assert cpu_shares(3, [0, 1]) == [(0,), (1,), (0,)]


def test_plan_on_cpu_gives_ports_and_cores(tmp_path: Path):
    cfg = FleetConfig(replicas=2, gpus="none", port_base=31000, state_dir=tmp_path, engine_args=["--seed", "1"])
    specs = plan_replicas(cfg, "/m", LocalBackend())
    assert [s.port for s in specs] == [31000, 31001]
    assert all(s.cpus for s in specs)
    assert specs[0].extra_args == ("--seed", "1")
    assert specs[0].cache_dir != specs[1].cache_dir


def test_sglang_without_gpu_is_refused_with_a_hint(tmp_path: Path):
    with pytest.raises(ConfigError, match="needs a GPU"):
        plan_replicas(FleetConfig(engine="sglang", gpus="none", state_dir=tmp_path), "/m", LocalBackend())


def test_gpus_flag_is_validated():
    with pytest.raises(ValueError):
        FleetConfig(gpus="0,0")
    with pytest.raises(ValueError):
        FleetConfig(gpus="x")
    assert FleetConfig(gpus=" 1, 2").gpus == "1,2"


def test_vllm_phases_and_fatal_lines_from_real_log_text():
    eng = get_engine("vllm")
    assert eng.phase_of("(Worker pid=1) INFO [cpu_model_runner.py:68] Starting to load model /m...") == Phase.LOADING
    assert eng.phase_of("INFO:     Application startup complete.") == Phase.WARMING
    assert eng.phase_of("WARNING Enforce eager set, disabling torch.compile, CUDAGraphs") is None
    oom = eng.fatal_of("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    assert oom and "gpu-memory-utilization" in oom.hint
    assert eng.fatal_of("OSError: [Errno 98] Address already in use") is not None
    assert eng.fatal_of("INFO Loading weights took 0.58 seconds") is None


METRICS = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="smollm2"} 3.0
vllm:num_requests_waiting{engine="0",model_name="smollm2"} 1.0
vllm:generation_tokens_total{engine="0",model_name="smollm2"} 120.0
vllm:kv_cache_usage_perc{engine="0",model_name="smollm2"} 0.25
vllm:cache_config_info{block_size="128",cache_dtype="auto",enable_prefix_caching="True",engine="0",num_gpu_blocks="728"} 1.0
"""  # noqa: E501  (a page as vLLM serves it: one sample a line)


def test_vllm_metrics_and_effective_config():
    eng = get_engine("vllm")
    m = eng.parse_metrics(METRICS)
    assert (m.running, m.waiting, m.generation_tokens_total, m.kv_cache_usage) == (3.0, 1.0, 120.0, 0.25)
    cfg = eng.effective_config(
        {
            "/v1/models": {"data": [{"id": "smollm2", "max_model_len": 2048}]},
            "/version": {"version": "0.32.0"},
            "/metrics": METRICS,
        }
    )
    assert cfg == {
        "model": "smollm2",
        "max_model_len": 2048,
        "version": "0.32.0",
        "cache.block_size": "128",
        "cache.cache_dtype": "auto",
        "cache.num_gpu_blocks": "728",
        "cache.enable_prefix_caching": "True",
    }


def test_compare_configs_reports_each_differing_field():
    hard, soft = compare_configs(
        [
            {"model": "a", "max_model_len": 2048, "cache.num_gpu_blocks": "10"},
            {"model": "a", "max_model_len": 4096, "cache.num_gpu_blocks": "11"},
        ],
        frozenset({"cache.num_gpu_blocks"}),
    )
    assert hard == ["max_model_len: replica 0=2048, replica 1=4096"]
    assert soft and soft[0].startswith("cache.num_gpu_blocks")


def test_metrics_text_is_read_by_prometheus_client_parser():
    """Escaped label values, several label sets summed, and a
    malformed line that ends the page but keeps what came before."""
    from fleetgen.fleet.engines.base import metric_labels, metric_totals

    text = (
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{engine="0"} 2.0\n'
        'vllm:num_requests_running{engine="1"} 3.0\n'
        'vllm:cache_config_info{block_size="16",note="say \\"hi\\", then }"} 1.0\n'
        "this line is not prometheus text\n"
        'vllm:num_requests_waiting{engine="0"} 9.0\n'
    )
    assert metric_totals(text) == {"vllm:num_requests_running": 5.0, "vllm:cache_config_info": 1.0}
    assert metric_labels(text, "vllm:cache_config_info") == {"block_size": "16", "note": 'say "hi", then }'}
    assert metric_labels(text, "vllm:absent_info") == {}


@pytest.mark.engine
def test_real_vllm_cpu_metrics_page_is_parsed(cpu_fleet):
    """The real vLLM-CPU /metrics page (histograms, _created samples, info gauges) through the library parser."""
    import urllib.request

    text = urllib.request.urlopen(cpu_fleet.endpoints[0] + "/metrics", timeout=10).read().decode()
    eng = get_engine("vllm")
    m = eng.parse_metrics(text)
    assert m.running is not None and m.waiting is not None and m.kv_cache_usage is not None
    assert m.generation_tokens_total is not None and m.generation_tokens_total >= 0
    cfg = eng.effective_config({"/metrics": text})
    recorded = cpu_fleet.replicas[0].effective_config
    assert cfg["cache.block_size"] == recorded["cache.block_size"]
    assert cfg["cache.num_gpu_blocks"] == recorded["cache.num_gpu_blocks"]


@pytest.mark.engine
def test_real_vllm_cpu_narrows_its_metrics_page_to_the_load_lines(cpu_fleet):
    """The poller's narrowed page (prometheus_client's name[] filter): the same load, a fraction of the bytes."""
    import urllib.request

    from fleetgen.generate.dispatch.load_poll import load_page

    eng = get_engine("vllm")
    base = cpu_fleet.endpoints[0]
    whole = urllib.request.urlopen(base + "/metrics", timeout=10).read().decode()
    narrow = urllib.request.urlopen(base + load_page(eng), timeout=10).read().decode()
    names = {line.split("{", 1)[0].split(" ", 1)[0] for line in narrow.splitlines() if line and line[0] != "#"}
    assert names and names <= eng.load_metrics, names - eng.load_metrics
    assert {"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"} <= names
    assert len(narrow) * 10 < len(whole), (len(narrow), len(whole))
    m = eng.parse_load(narrow)
    assert m.running is not None and m.waiting is not None and m.kv_cache_usage is not None
    assert m.preemptions_total is not None and m.generation_tokens_total is not None


def test_cpu_flags_reads_the_flags_line_and_avx2_only_makes_bf16_slow():
    avx2 = "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 avx avx2 fma\n"
    avx512 = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512bw avx512_bf16\n"
    assert cpu_flags(avx2) == {"fpu", "sse2", "avx", "avx2", "fma"}
    assert bf16_is_slow(cpu_flags(avx2))
    assert not bf16_is_slow(cpu_flags(avx512))
    assert not bf16_is_slow(cpu_flags("no flags here"))  # an unknown CPU keeps the model's dtype


def test_vllm_cpu_runs_float32_where_bf16_is_slow_unless_a_dtype_is_given(monkeypatch):
    eng = get_engine("vllm")
    monkeypatch.setattr(vllm_engine, "host_bf16_is_slow", lambda: True)
    assert flag(eng.command(spec(), "py"), "--dtype") == "float32"
    assert "--dtype" not in eng.command(spec(gpus=(0,)), "py")
    given = eng.command(spec(extra_args=("--dtype=bfloat16",)), "py")
    assert "float32" not in given and given[-1] == "--dtype=bfloat16"
    monkeypatch.setattr(vllm_engine, "host_bf16_is_slow", lambda: False)
    assert "--dtype" not in eng.command(spec(), "py")
