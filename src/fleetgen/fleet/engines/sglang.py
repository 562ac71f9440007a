"""SGLang, started as `python -m sglang.launch_server`; GPU only (it has no CPU build).

Contracts are taken from sglang 0.5.12 (`sglang/srt/server_args.py`,
`sglang/srt/entrypoints/http_server.py`, `sglang/srt/entrypoints/v1_loads.py`,
`sglang/srt/observability/metrics_collector.py`); older endpoint names from 0.5.4 and 0.5.6.
Command lines are checked against SGLang's own parser by `sglang_validate`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from fleetgen.errors import EngineError
from fleetgen.fleet.engines.base import Engine, FatalPattern, Metrics, Phase, ReplicaSpec, parse_prometheus

_P = re.compile

# SGLang picks a free NCCL port by binding port 0 and releasing it (PortArgs.init_new); eight
# replicas starting together can be handed the same one. Replica i gets port_base + i + this.
NCCL_PORT_OFFSET = 1000

# Fields of /server_info compared across replicas. /server_info is `dataclasses.asdict(server_args)`
# plus the scheduler's info, so it also holds `api_key`: only these named fields are ever kept.
CONFIG_FIELDS = (
    "model_path", "served_model_name", "version", "tp_size", "dtype", "kv_cache_dtype", "quantization",
    "attention_backend", "prefill_attention_backend", "decode_attention_backend",
    "mem_fraction_static", "max_running_requests", "context_length", "max_total_tokens",
    "max_total_num_tokens", "max_req_input_len", "chunked_prefill_size", "max_prefill_tokens",
    "page_size", "schedule_policy", "disable_radix_cache", "disable_cuda_graph", "cuda_graph_max_bs",
    "reasoning_parser", "tool_call_parser", "sampling_defaults", "mamba_scheduler_strategy",
    "mamba_ssm_dtype", "speculative_algorithm", "enable_metrics",
)


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
        "--enable-piecewise-cuda-graph", seen_in="0.5.6", deprecated_in="0.5.12",
        replacement="nothing: piecewise CUDA graphs are on by default (--disable-piecewise-cuda-graph turns them off)",
    ),
    FlagHistory(
        "--hybrid-kvcache-ratio", seen_in="0.5.6", deprecated_in="0.5.12", replacement="--swa-full-tokens-ratio"
    ),
    FlagHistory(
        "--collect-tokens-histogram", seen_in="0.5.6", deprecated_in="0.5.12",
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


class SglangEngine(Engine):
    name = "sglang"
    # 0.5.12: 503 while the server is Starting (before its warm-up request), then one generated token
    # per call (SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION defaults on). /model_info answers earlier:
    # the HTTP server is up but not ready.
    health_path = "/health"
    up_path = "/model_info"
    loads_path = "/v1/loads"
    ready_log_line = "The server is fired up and ready to roll!"
    # /server_info and /model_info appeared in 0.5.6; 0.5.4 has only the get_ names (deprecated later).
    endpoint_fallbacks = {"/server_info": "/get_server_info", "/model_info": "/get_model_info"}
    phase_patterns = (
        (_P(r"The server is fired up and ready to roll|Uvicorn running on|Start of (pd disaggregation )?warmup"), Phase.WARMING),
        (_P(r"Capture cuda graph begin|Capture piecewise CUDA graph|Capturing batches|Compiling"), Phase.COMPILING),
        (_P(r"Load weight begin|Loading safetensors|Load weight end"), Phase.LOADING),
        (_P(r"server_args=|Init torch distributed"), Phase.STARTING),
    )
    fatal_patterns = (
        FatalPattern(
            _P(r"Capture cuda graph failed|CUDA out of memory|OutOfMemoryError"),
            "out of memory while capturing CUDA graphs: lower --mem-fraction-static or --cuda-graph-max-bs",
        ),
        FatalPattern(
            _P(r"Not enough memory\. Please try to increase --mem-fraction-static"),
            "no room for the KV pool: raise --mem-fraction-static or lower --context-length / --max-running-requests",
        ),
        FatalPattern(
            _P(r"(ImportError|OSError|RuntimeError).*(sgl_kernel|common_ops|libnvrtc\.so|libcudart\.so|undefined symbol)"
               r"|undefined symbol: "),
            "SGLang's kernels do not load: run `fleetgen doctor --engine sglang`",
        ),
        FatalPattern(
            _P(r"FlashAttention v3 Backend requires|FlashAttention.*(not supported|only supports)"),
            "this attention backend does not support the GPU: pass --attention-backend flashinfer",
        ),
        FatalPattern(_P(r"Address already in use|Port is already in use"), "a port is taken: choose another --port-base"),
        FatalPattern(
            _P(r"error: unrecognized arguments|error: argument "),
            "SGLang rejected a flag: check the pass-through arguments after `--`",
        ),
    )

    def command(self, spec: ReplicaSpec, python: str) -> list[str]:
        return [python, "-m", "sglang.launch_server", *self.server_args(spec)]

    def server_args(self, spec: ReplicaSpec) -> list[str]:
        """The arguments after `-m sglang.launch_server` (what SGLang's parser sees)."""
        passed = set(a.split("=", 1)[0] for a in spec.extra_args if a.startswith("--"))
        owned = {"--model-path", "--served-model-name", "--host", "--port", "--nccl-port", "--api-key"}
        clash = sorted(passed & owned)
        if clash:
            raise EngineError(
                f"engine_args set {', '.join(clash)}, which fleetgen sets per replica",
                hint="use the fleet settings (model, served_model_name, host, port_base, api_key) instead",
            )
        args = [
            "--model-path", spec.model,
            "--served-model-name", spec.served_model_name,
            "--host", spec.host,
            "--port", str(spec.port),
            "--nccl-port", str(spec.port + NCCL_PORT_OFFSET),
        ]
        if spec.tp > 1 and not passed & {"--tp-size", "--tensor-parallel-size"}:
            args += ["--tp-size", str(spec.tp)]
        if spec.max_running_requests and "--max-running-requests" not in passed:
            args += ["--max-running-requests", str(spec.max_running_requests)]
        if spec.context_length and "--context-length" not in passed:
            args += ["--context-length", str(spec.context_length)]
        if spec.enforce_eager and "--disable-cuda-graph" not in passed:
            args += ["--disable-cuda-graph"]
        if spec.tool_call_parser and "--tool-call-parser" not in passed:
            args += ["--tool-call-parser", spec.tool_call_parser]
        if spec.api_key:
            # 0.5.12 reads the key from argv only (no environment variable); state keeps a redacted copy.
            args += ["--api-key", spec.api_key]
        if "--enable-metrics" not in passed:
            args += ["--enable-metrics"]
        return args + list(spec.extra_args)

    def validate_commands(self, argvs: list[list[str]], python: str) -> None:
        """SGLang's own parser judges every command line: FLEETGEN_SGLANG_PYTHON's, else the launch python's."""
        from fleetgen.fleet.engines.sglang_validate import validate_command_lines

        validate_command_lines(argvs, os.environ.get("FLEETGEN_SGLANG_PYTHON") or python)

    def environment(self, spec: ReplicaSpec) -> dict[str, str]:
        env = super().environment(spec)
        if spec.cache_dir is not None:
            # JIT caches that replicas compiling at once race on; each replica slot gets its own.
            env["FLASHINFER_WORKSPACE_BASE"] = str(spec.cache_dir / "flashinfer")  # flashinfer/jit/env.py
            env["TVM_FFI_CACHE_DIR"] = str(spec.cache_dir / "tvm-ffi")  # tvm_ffi/cpp/extension.py
            env["SGLANG_DG_CACHE_DIR"] = str(spec.cache_dir / "deep_gemm")  # sglang/srt/environ.py
        return env

    def parse_metrics(self, text: str) -> Metrics:
        m = parse_prometheus(text)
        extra = {
            k.removeprefix("sglang:"): v
            for k, v in m.items()
            if k in ("sglang:gen_throughput", "sglang:cache_hit_rate", "sglang:num_used_tokens",
                     "sglang:prompt_tokens_total", "sglang:num_retracted_reqs", "sglang:mamba_usage")
        }
        return Metrics(
            running=m.get("sglang:num_running_reqs"),
            waiting=m.get("sglang:num_queue_reqs"),
            generation_tokens_total=m.get("sglang:generation_tokens_total"),
            kv_cache_usage=m.get("sglang:token_usage"),
            extra=extra,
        )

    def parse_loads(self, payload: object) -> Metrics | None:
        """Read /v1/loads (0.5.12) or the older /get_load list into running/waiting/token usage."""
        if isinstance(payload, dict) and isinstance(payload.get("loads"), list):
            loads = payload["loads"]
            if not loads:
                return None
            return Metrics(
                running=float(sum(d.get("num_running_reqs", 0) for d in loads)),
                waiting=float(sum(d.get("num_waiting_reqs", 0) for d in loads)),
                kv_cache_usage=max(float(d.get("token_usage", 0.0)) for d in loads),
                extra={"gen_throughput": float(sum(d.get("gen_throughput", 0.0) for d in loads))},
            )
        if isinstance(payload, list) and payload and all(isinstance(d, dict) for d in payload):
            waiting = float(sum(d.get("num_waiting_reqs", 0) for d in payload))
            return Metrics(running=float(sum(d.get("num_reqs", 0) for d in payload)) - waiting, waiting=waiting)
        return None

    def config_endpoints(self) -> tuple[str, ...]:
        return ("/model_info", "/server_info")

    def effective_config(self, answers: dict[str, object]) -> dict[str, object]:
        cfg: dict[str, object] = {}
        info = answers.get("/model_info")
        if isinstance(info, dict):
            cfg["model_path"] = info.get("model_path")
            for key in ("model_type", "architectures", "weight_version"):
                if key in info:
                    cfg[f"model.{key}"] = info[key]
        server = answers.get("/server_info")
        if isinstance(server, dict):
            for key in CONFIG_FIELDS:
                if key in server:
                    cfg[key] = server[key]
        return cfg
