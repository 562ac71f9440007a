"""SGLang, started as `python -m sglang.launch_server`; GPU only (it has no CPU build).

Contracts are taken from sglang 0.5.12 (`sglang/srt/server_args.py`,
`sglang/srt/entrypoints/http_server.py`, `sglang/srt/entrypoints/v1_loads.py`,
`sglang/srt/observability/metrics_collector.py`); older endpoint names from 0.5.4 and 0.5.6.
Command lines are checked against SGLang's own parser by `sglang_validate`.
"""

from __future__ import annotations

import os

from fleetgen.errors import EngineError
from fleetgen.fleet.engines.base import (
    Engine,
    FatalPattern,
    LazyRegex,
    Metrics,
    Phase,
    ReplicaSpec,
    metric_totals,
    without_flag,
)
from fleetgen.fleet.engines.sglang_validate import validate_command_lines
from fleetgen.fleet.engines.sharing import given_share

_P = LazyRegex

# SGLang picks a free NCCL port by binding port 0 and releasing it (PortArgs.init_new); eight
# replicas starting together can be handed the same one. Replica i gets port_base + i + this.
NCCL_PORT_OFFSET = 1000

# Static memory (weights + KV pool) of all replicas sharing one GPU together, as a fraction of the
# GPU, where engine_args give no --mem-fraction-static (a given one is each replica's share).
SHARED_GPU_BUDGET = 0.8

# Fields of /server_info compared across replicas. /server_info is `dataclasses.asdict(server_args)`
# plus the scheduler's info, so it also holds `api_key`: only these named fields are ever kept.
CONFIG_FIELDS = (
    "model_path",
    "served_model_name",
    "version",
    "tp_size",
    "dtype",
    "kv_cache_dtype",
    "quantization",
    "attention_backend",
    "prefill_attention_backend",
    "decode_attention_backend",
    "mem_fraction_static",
    "max_running_requests",
    "context_length",
    "max_total_tokens",
    "max_total_num_tokens",
    "max_req_input_len",
    "chunked_prefill_size",
    "max_prefill_tokens",
    "page_size",
    "schedule_policy",
    "disable_radix_cache",
    "disable_cuda_graph",
    "cuda_graph_max_bs",
    "reasoning_parser",
    "tool_call_parser",
    "sampling_defaults",
    "mamba_scheduler_strategy",
    "mamba_ssm_dtype",
    "speculative_algorithm",
    "enable_metrics",
)


def shared_fraction(budget: float, slot: int, sharers: int) -> float:
    """The fraction of the memory free at its start that replica `slot` of `sharers` on one GPU takes.

    Each of the `sharers` gets `budget / sharers` of the whole GPU. The replicas before it hold
    `slot` such shares when it starts, so its share of what is still free is larger.
    """
    each = budget / sharers
    return round(min(0.95, each / (1 - slot * each)), 3)


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
    memory_flag = "--mem-fraction-static"
    share_of_free_memory = True  # 0.5.12 model_runner_kv_cache_mixin._profile_available_bytes
    kv_pool_field = "max_total_num_tokens"
    phase_patterns = (
        (
            _P(r"The server is fired up and ready to roll|Uvicorn running on|Start of (pd disaggregation )?warmup"),
            Phase.WARMING,
        ),
        (_P(r"Capture cuda graph begin|Capture piecewise CUDA graph|Capturing batches|Compiling"), Phase.COMPILING),
        (_P(r"Load weight begin|Loading safetensors|Load weight end"), Phase.LOADING),
        (_P(r"server_args=|Init torch distributed"), Phase.STARTING),
    )
    # 0.5.12 `cuda_graph_runner.py` / `piecewise_cuda_graph_runner.py`: a warm JIT cache shows here
    # (a replica with caches of its own takes many times longer: BENCHMARKS.md, "figures the code cites").
    timing_patterns = (
        (_P(r"Capture cuda graph end\. Time elapsed: ([0-9.]+) s"), "cuda graph capture"),
        (_P(r"Capture piecewise CUDA graph end\. Time elapsed: ([0-9.]+) s"), "piecewise graph capture"),
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
            _P(
                r"(ImportError|OSError|RuntimeError).*(sgl_kernel|common_ops|libnvrtc\.so|libcudart\.so|undefined "
                r"symbol)"
                r"|undefined symbol: "
            ),
            "SGLang's kernels do not load: run `fleetgen doctor --engine sglang`",
        ),
        FatalPattern(
            _P(r"FlashAttention v3 Backend requires|FlashAttention.*(not supported|only supports)"),
            "this attention backend does not support the GPU: pass --attention-backend flashinfer",
        ),
        FatalPattern(
            _P(r"Address already in use|Port is already in use"), "a port is taken: choose another --port-base"
        ),
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
            "--model-path",
            spec.model,
            "--served-model-name",
            spec.served_model_name,
            "--host",
            spec.host,
            "--port",
            str(spec.port),
            "--nccl-port",
            str(spec.port + NCCL_PORT_OFFSET),
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
        if not spec.prefix_cache and "--disable-radix-cache" not in passed:
            # A generation job caches every finished answer; once those fill the KV pool, SGLang (through
            # 0.5.23) rebuilds a heap of every cached leaf on each allocation, and a job longer than the pool
            # ran at a fraction of its fresh speed (BENCHMARKS.md, "steady state"). prefix_cache: true keeps it.
            args += ["--disable-radix-cache"]
        if spec.api_key:
            # 0.5.12 reads the key from argv only (no environment variable); state keeps a redacted copy.
            args += ["--api-key", spec.api_key]
        if "--enable-metrics" not in passed:
            args += ["--enable-metrics"]
        extra = list(spec.extra_args)
        if spec.on_gpu and spec.gpu_sharers > 1:
            # --mem-fraction-static is a share of the memory free before the weights load, so the
            # replicas of one GPU get rising shares of what the ones before them left free. A given
            # value is each replica's share of the whole GPU (sharing.given_share checks they fit).
            # A later replica whose GPU was measured (spec.share) gets the first one's bytes instead,
            # and its KV pool as --max-total-tokens (a given cap is at least that pool: it replaces it).
            given = given_share(spec, "--mem-fraction-static")
            budget = given * spec.gpu_sharers if given is not None else SHARED_GPU_BUDGET
            extra = without_flag(extra, "--mem-fraction-static")
            measured = spec.share.fraction() if spec.share is not None else None
            fraction = measured if measured is not None else shared_fraction(budget, spec.gpu_slot, spec.gpu_sharers)
            args += ["--mem-fraction-static", str(fraction)]
            if spec.share is not None and spec.share.kv_tokens:
                extra = without_flag(extra, "--max-total-tokens")
                args += ["--max-total-tokens", str(spec.share.kv_tokens)]
        return args + extra

    def validate_commands(self, argvs: list[list[str]], python: str) -> None:
        """SGLang's own parser judges every command line: FLEETGEN_SGLANG_PYTHON's, else the launch python's."""
        validate_command_lines(argvs, os.environ.get("FLEETGEN_SGLANG_PYTHON") or python)

    def environment(self, spec: ReplicaSpec) -> dict[str, str]:
        env = super().environment(spec)
        if spec.cache_dir is not None:
            # flashinfer's JIT cannot be seeded by copying: its build.ninja names absolute paths and
            # .ninja_log is keyed by them, so a workspace copied elsewhere rebuilds every kernel. It
            # depends on the GPU, not the model, and flashinfer 0.6 locks each kernel's build and load
            # (jit/core.py `build_and_load`): one workspace for the replicas of a host.
            env["FLASHINFER_WORKSPACE_BASE"] = str(spec.cache_dir.parent / f"{self.name}-shared" / "flashinfer")
            # The other JIT and compile caches of 0.5.12, in the replica's cache dir: on a local GPU fleet
            # one dir per engine + model + GPU kind that every replica shares (replica_plan.shared_cache_dir).
            c = spec.cache_dir
            env["TVM_FFI_CACHE_DIR"] = str(c / "tvm-ffi")  # sgl_kernel's jit_kernel via tvm_ffi/cpp/extension.py
            env["SGLANG_DG_CACHE_DIR"] = str(c / "deep_gemm")  # srt/environ.py -> DG_JIT_CACHE_DIR
            env["SGLANG_CACHE_DIR"] = str(
                c / "sglang"
            )  # torch_compile_cache (its inductor/triton), flashinfer autotune
            env["TRITON_CACHE_DIR"] = str(c / "triton")  # triton's own cache (sglang's triton kernels)
            env["TORCHINDUCTOR_CACHE_DIR"] = str(c / "inductor")  # torch.compile outside sglang's compile backend
        return env

    load_metrics = frozenset(
        {
            "sglang:num_running_reqs",
            "sglang:num_queue_reqs",
            "sglang:generation_tokens_total",
            "sglang:token_usage",
            "sglang:num_retracted_reqs",
            "sglang:eviction_duration_seconds",
            "sglang:eviction_duration_seconds_sum",
        }
    )

    def parse_metrics(self, text: str) -> Metrics:
        m = metric_totals(text)
        extra = {
            k.removeprefix("sglang:"): v
            for k, v in m.items()
            if k
            in (
                "sglang:gen_throughput",
                "sglang:cache_hit_rate",
                "sglang:num_used_tokens",
                "sglang:prompt_tokens_total",
                "sglang:num_retracted_reqs",
                "sglang:mamba_usage",
            )
        }
        return Metrics(
            running=m.get("sglang:num_running_reqs"),
            waiting=m.get("sglang:num_queue_reqs"),
            generation_tokens_total=m.get("sglang:generation_tokens_total"),
            kv_cache_usage=m.get("sglang:token_usage"),
            retracted=m.get("sglang:num_retracted_reqs"),
            eviction_seconds_total=m.get("sglang:eviction_duration_seconds_sum"),
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
