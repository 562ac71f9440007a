"""SGLang, started as `python -m sglang.launch_server`; GPU only (it has no CPU build)."""

from __future__ import annotations

import re

from fleetgen.fleet.engines.base import Engine, FatalPattern, Metrics, Phase, ReplicaSpec, parse_prometheus

_P = re.compile

NCCL_PORT_OFFSET = 1000


class SglangEngine(Engine):
    name = "sglang"
    phase_patterns = (
        (_P(r"The server is fired up and ready to roll"), Phase.WARMING),
        (_P(r"Capture cuda graph|Capturing batches|cuda graph|Compiling"), Phase.COMPILING),
        (_P(r"Load weight begin|Loading safetensors|Load weight end"), Phase.LOADING),
        (_P(r"server_args=|Init torch distributed"), Phase.STARTING),
    )
    fatal_patterns = (
        FatalPattern(
            _P(r"Capture cuda graph failed|CUDA out of memory|OutOfMemoryError"),
            "out of memory while capturing CUDA graphs: lower --mem-fraction-static or --cuda-graph-max-bs",
        ),
        FatalPattern(
            _P(r"Not enough memory|not enough memory for the KV"),
            "no room for the KV pool: raise --mem-fraction-static or lower --context-length",
        ),
        FatalPattern(
            _P(r"sgl_kernel|undefined symbol|libnvrtc\.so|libcudart\.so"),
            "SGLang's kernels do not load: run `fleetgen doctor --engine sglang`",
        ),
        FatalPattern(
            _P(r"FlashAttention.*(not supported|only supports)|fa3.*(not supported|unsupported)"),
            "this attention backend does not support the GPU: pass --attention-backend flashinfer",
        ),
        FatalPattern(_P(r"Address already in use"), "the port is taken: choose another --port-base"),
        FatalPattern(
            _P(r"error: unrecognized arguments|error: argument "),
            "SGLang rejected a flag: check the pass-through arguments after `--`",
        ),
    )

    def command(self, spec: ReplicaSpec, python: str) -> list[str]:
        cmd = [
            python, "-m", "sglang.launch_server",
            "--model-path", spec.model,
            "--served-model-name", spec.served_model_name,
            "--host", spec.host,
            "--port", str(spec.port),
            # SGLang picks a random NCCL port otherwise; eight replicas starting together collide.
            "--nccl-port", str(spec.port + NCCL_PORT_OFFSET),
        ]
        if spec.tp > 1:
            cmd += ["--tp-size", str(spec.tp)]
        if spec.max_running_requests:
            cmd += ["--max-running-requests", str(spec.max_running_requests)]
        if spec.context_length:
            cmd += ["--context-length", str(spec.context_length)]
        if spec.enforce_eager:
            cmd += ["--disable-cuda-graph"]
        if spec.api_key:
            cmd += ["--api-key", spec.api_key]
        if "--enable-metrics" not in spec.extra_args:
            cmd += ["--enable-metrics"]
        cmd += list(spec.extra_args)
        return cmd

    def parse_metrics(self, text: str) -> Metrics:
        m = parse_prometheus(text)
        return Metrics(
            running=m.get("sglang:num_running_reqs"),
            waiting=m.get("sglang:num_queue_reqs"),
            generation_tokens_total=m.get("sglang:generation_tokens_total"),
            kv_cache_usage=m.get("sglang:token_usage"),
        )

    def config_endpoints(self) -> tuple[str, ...]:
        return ("/model_info", "/server_info")

    def effective_config(self, answers: dict[str, object]) -> dict[str, object]:
        cfg: dict[str, object] = {}
        info = answers.get("/model_info")
        if isinstance(info, dict):
            cfg["model_path"] = info.get("model_path")
        server = answers.get("/server_info")
        if isinstance(server, dict):
            for key in (
                "served_model_name", "attention_backend", "mem_fraction_static", "max_running_requests",
                "context_length", "max_total_num_tokens", "tp_size", "chunked_prefill_size",
                "reasoning_parser", "dtype", "version",
            ):
                if key in server:
                    cfg[key] = server[key]
        return cfg
