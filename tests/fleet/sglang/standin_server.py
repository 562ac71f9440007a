"""A stand-in for an SGLang 0.5.12 server (no model): replays its HTTP response shapes on CPU.

Shapes copied from sglang 0.5.12:
- /health, /health_generate: sglang/srt/entrypoints/http_server.py `health_generate` — 503 while
  ServerStatus.Starting (before the warm-up request), 200 with an empty body after.
- /model_info, /get_model_info: http_server.py `model_info`.
- /server_info, /get_server_info: http_server.py `server_info` — dataclasses.asdict(server_args)
  + scheduler_info (max_total_num_tokens, max_req_input_len) + internal_states + version.
  (0.5.4 has only the /get_ names: `--old` serves those alone.)
- /v1/loads: sglang/srt/entrypoints/v1_loads.py `get_loads`; /get_load: http_server.py `get_load`.
- /generate: GenerateReqInput answer {text, output_ids, meta_info{id, finish_reason, prompt_tokens,
  completion_tokens, cached_tokens, e2e_latency}} (tokenizer_manager.py).
- /v1/chat/completions: sglang/srt/entrypoints/openai/protocol.py ChatCompletionResponse /
  ChatCompletionResponseChoice / ChatMessage (reasoning_content) / UsageInfo.
- /metrics: names from sglang/srt/observability/metrics_collector.py (labels as SGLang sets them).
- Log lines: model_runner.py ("Load weight begin", "Capture cuda graph begin"), cuda_graph_runner.py
  ("Capture cuda graph end. Time elapsed: ..."), and http_server.py
  ("The server is fired up and ready to roll!").
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

from aiohttp import web

SERVER_ARGS_DEFAULTS = {
    "tokenizer_path": None,
    "tokenizer_mode": "auto",
    "skip_tokenizer_init": False,
    "load_format": "auto",
    "trust_remote_code": False,
    "context_length": None,
    "is_embedding": False,
    "revision": None,
    "dtype": "auto",
    "quantization": None,
    "kv_cache_dtype": "auto",
    "mem_fraction_static": 0.88,
    "max_running_requests": None,
    "max_total_tokens": None,
    "chunked_prefill_size": 8192,
    "max_prefill_tokens": 16384,
    "schedule_policy": "fcfs",
    "page_size": 1,
    "tp_size": 1,
    "dp_size": 1,
    "enable_metrics": True,
    "api_key": None,
    "served_model_name": None,
    "reasoning_parser": None,
    "tool_call_parser": None,
    "sampling_defaults": "model",
    "attention_backend": "flashinfer",
    "prefill_attention_backend": None,
    "decode_attention_backend": None,
    "speculative_algorithm": None,
    "mamba_ssm_dtype": None,
    "mamba_scheduler_strategy": "auto",
    "disable_radix_cache": False,
    "cuda_graph_max_bs": 256,
    "disable_cuda_graph": False,
    "nccl_port": None,
}


def log(line: str) -> None:
    print(f"[2026-01-01 00:00:00] {line}", flush=True)


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    for flag in (
        "--model-path",
        "--served-model-name",
        "--host",
        "--api-key",
        "--reasoning-parser",
        "--attention-backend",
        "--mamba-scheduler-strategy",
        "--mamba-ssm-dtype",
    ):
        p.add_argument(flag)
    for flag in (
        "--port",
        "--nccl-port",
        "--max-running-requests",
        "--context-length",
        "--chunked-prefill-size",
        "--tp-size",
    ):
        p.add_argument(flag, type=int)
    p.add_argument("--mem-fraction-static", type=float)
    p.add_argument("--enable-metrics", action="store_true")
    p.add_argument("--disable-cuda-graph", action="store_true")
    p.add_argument("--disable-radix-cache", action="store_true")
    # Stand-in controls, not SGLang flags.
    p.add_argument("--standin-listen-after", type=float, default=0.0)
    p.add_argument("--standin-ready-after", type=float, default=0.0)
    p.add_argument("--standin-fatal", default=None)
    p.add_argument("--standin-old", action="store_true")
    p.add_argument("--standin-max-total-num-tokens", type=int, default=123456)
    # A pretend GPU (pretend_gpu.py) that this replica sizes its KV pool from, as SGLang does, and holds.
    p.add_argument("--max-total-tokens", type=int)
    p.add_argument("--standin-gpu", default=None)
    return p.parse_args(argv)


def build_app(a: argparse.Namespace) -> web.Application:
    started = time.monotonic()
    served = a.served_model_name or a.model_path
    server_args = dict(SERVER_ARGS_DEFAULTS)
    server_args.update(
        {
            "model_path": a.model_path,
            "served_model_name": served,
            "host": a.host,
            "port": a.port,
            "nccl_port": a.nccl_port,
            "api_key": a.api_key,
            "reasoning_parser": a.reasoning_parser,
            "max_running_requests": a.max_running_requests,
            "context_length": a.context_length,
            "tp_size": a.tp_size or 1,
            "disable_cuda_graph": a.disable_cuda_graph,
            "disable_radix_cache": a.disable_radix_cache,
            "enable_metrics": a.enable_metrics,
            "max_total_tokens": a.max_total_tokens,
        }
    )
    for key in (
        "attention_backend",
        "mamba_scheduler_strategy",
        "mamba_ssm_dtype",
        "chunked_prefill_size",
        "mem_fraction_static",
    ):
        if getattr(a, key) is not None:
            server_args[key] = getattr(a, key)
    state = {"generated": 0}

    def ready() -> bool:
        return time.monotonic() - started >= a.standin_ready_after

    @web.middleware
    async def auth(request: web.Request, handler):
        # http_server.py add_api_key_middleware: every route but /health*, /metrics needs the key.
        if a.api_key and not request.path.startswith(("/health", "/metrics")):
            if request.headers.get("Authorization") != f"Bearer {a.api_key}":
                return web.json_response({"error": "Unauthorized"}, status=401)
        return await handler(request)

    async def health(_request):
        return web.Response(status=200 if ready() else 503)

    async def model_info(_request):
        return web.json_response(
            {
                "model_path": a.model_path,
                "tokenizer_path": a.model_path,
                "is_generation": True,
                "preferred_sampling_params": None,
                "weight_version": "default",
                "has_image_understanding": False,
                "has_audio_understanding": False,
                "model_type": "qwen3_5",
                "architectures": ["Qwen3_5ForConditionalGeneration"],
            }
        )

    async def server_info(_request):
        return web.json_response(
            {
                **server_args,
                "max_total_num_tokens": a.standin_max_total_num_tokens,
                "max_req_input_len": (a.context_length or 8192) - 5,
                # Shape as the H200 served it (fixtures/h200-get_server_info.json).
                "internal_states": [
                    {
                        "last_gen_throughput": 0.0,
                        "effective_max_running_requests_per_dp": a.max_running_requests or 4096,
                        "memory_usage": {
                            "weight": 51.2,
                            "kvcache": 60.1,
                            "token_capacity": a.standin_max_total_num_tokens,
                            "graph": 0.49,
                        },
                    }
                ],
                "version": "0.5.12",
                "status": "ready",
            }
        )

    async def loads(_request):
        load = {
            "dp_rank": 0,
            "timestamp": time.time(),
            "num_running_reqs": 3,
            "num_waiting_reqs": 2,
            "num_used_tokens": 4000,
            "num_total_tokens": 5000,
            "max_total_num_tokens": 123456,
            "token_usage": 0.25,
            "gen_throughput": 812.5,
            "cache_hit_rate": 0.1,
            "utilization": 0.3,
            "max_running_requests": a.max_running_requests or 64,
        }
        load["num_total_reqs"] = load["num_running_reqs"] + load["num_waiting_reqs"]
        return web.json_response(
            {
                "timestamp": "2026-01-01T00:00:00+00:00",
                "version": "0.5.12",
                "dp_rank_count": 1,
                "loads": [load],
                "aggregate": {
                    "total_running_reqs": 3,
                    "total_waiting_reqs": 2,
                    "total_reqs": 5,
                    "total_used_tokens": 4000,
                    "total_tokens": 5000,
                    "avg_token_usage": 0.25,
                    "avg_throughput": 812.5,
                    "avg_utilization": 0.3,
                },
            }
        )

    async def get_load(_request):
        return web.json_response(
            [
                {
                    "dp_rank": None,
                    "num_reqs": 5,
                    "num_waiting_reqs": 2,
                    "num_tokens": 5000,
                    "num_pending_tokens": 1000,
                    "ts_tic": time.perf_counter(),
                }
            ]
        )

    async def generate(request):
        body = await request.json()
        n = int(body.get("sampling_params", {}).get("max_new_tokens", 8))
        state["generated"] += n
        return web.json_response(
            {
                "text": " Paris.",
                "output_ids": [12366, 13][:n],
                "meta_info": {
                    "id": "c0ffee",
                    "finish_reason": {"type": "length", "length": n},
                    "prompt_tokens": 9,
                    "weight_version": "default",
                    "completion_tokens": n,
                    "cached_tokens": 0,
                    "e2e_latency": 0.01,
                },
            }
        )

    async def chat(request):
        body = await request.json()
        if body.get("model") not in (served, "default"):
            return web.json_response(
                {
                    "object": "error",
                    "message": f"The model `{body.get('model')}` does not exist.",
                    "type": "NotFoundError",
                    "param": None,
                    "code": 404,
                },
                status=404,
            )
        thinking = (body.get("chat_template_kwargs") or {}).get("enable_thinking", True)
        separate = body.get("separate_reasoning", True)
        reasoning, answer = "The user asks for France's capital.", "The capital of France is Paris."
        if a.reasoning_parser and thinking and separate:
            message = {"role": "assistant", "content": answer, "reasoning_content": reasoning, "tool_calls": None}
        elif thinking and a.reasoning_parser:
            message = {
                "role": "assistant",
                "content": f"<think>{reasoning}</think>{answer}",
                "reasoning_content": None,
                "tool_calls": None,
            }
        else:
            message = {"role": "assistant", "content": answer, "reasoning_content": None, "tool_calls": None}
        state["generated"] += 17
        return web.json_response(
            {
                "id": "3f1e",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": served,
                "choices": [
                    {"index": 0, "message": message, "logprobs": None, "finish_reason": "stop", "matched_stop": 151645}
                ],
                "usage": {
                    "prompt_tokens": 20,
                    "total_tokens": 37,
                    "completion_tokens": 17,
                    "prompt_tokens_details": None,
                    "reasoning_tokens": 9 if message["reasoning_content"] else 0,
                },
                "metadata": {"weight_version": "default"},
            }
        )

    async def metrics(_request):
        labels = f'engine_type="unified",model_name="{served}",moe_ep_rank="0",pp_rank="0",tp_rank="0"'
        return web.Response(
            text="\n".join(
                [
                    "# HELP sglang:num_running_reqs The number of running requests.",
                    "# TYPE sglang:num_running_reqs gauge",
                    f"sglang:num_running_reqs{{{labels}}} 3.0",
                    "# HELP sglang:num_queue_reqs The number of requests in the waiting queue.",
                    "# TYPE sglang:num_queue_reqs gauge",
                    f"sglang:num_queue_reqs{{{labels}}} 2.0",
                    "# TYPE sglang:token_usage gauge",
                    f"sglang:token_usage{{{labels}}} 0.25",
                    "# TYPE sglang:gen_throughput gauge",
                    f"sglang:gen_throughput{{{labels}}} 812.5",
                    "# TYPE sglang:cache_hit_rate gauge",
                    f"sglang:cache_hit_rate{{{labels}}} 0.1",
                    "# TYPE sglang:generation_tokens_total counter",
                    f"sglang:generation_tokens_total{{{labels}}} {float(state['generated'])}",
                    f"sglang:generation_tokens_created{{{labels}}} 1.767e+09",
                    "# TYPE sglang:prompt_tokens_total counter",
                    f"sglang:prompt_tokens_total{{{labels}}} 40.0",
                ]
            )
            + "\n",
            content_type="text/plain",
        )

    app = web.Application(middlewares=[auth])
    app.router.add_get("/health", health)
    app.router.add_get("/health_generate", health)
    info_prefix = "/get_" if a.standin_old else "/"
    app.router.add_get(info_prefix + "model_info", model_info)
    app.router.add_get(info_prefix + "server_info", server_info)
    if not a.standin_old:
        app.router.add_get("/v1/loads", loads)
    app.router.add_get("/get_load", get_load)
    app.router.add_post("/generate", generate)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/metrics", metrics)
    return app


async def main(argv: list[str]) -> None:
    a = parse(argv)
    log(f"server_args=ServerArgs(model_path='{a.model_path}', port={a.port}, ...)")
    if a.standin_fatal:
        log(a.standin_fatal)
        sys.exit(1)
    if a.standin_gpu:
        from pretend_gpu import GIB, locked

        with locked(a.standin_gpu) as gpu:
            log(f"Load weight begin. avail mem={(gpu.free - gpu.context) / GIB:.2f} GB")
            try:
                a.standin_max_total_num_tokens = gpu.start(a.mem_fraction_static or 0.88, a.max_total_tokens)
            except MemoryError as e:
                log(f"RuntimeError: {e}")
                sys.exit(1)
    else:
        log("Load weight begin. avail mem=79.10 GB")
    await asyncio.sleep(a.standin_listen_after)  # connection refused while "loading"
    # The H200's first replica's lines (2026-12-02, captures/s5/replica-0-startup.log).
    log("Capture cuda graph begin. This can take up to several minutes. avail mem=103.63 GB")
    log("Capture cuda graph end. Time elapsed: 3.19 s. mem usage=0.51 GB. avail mem=103.12 GB.")
    log("Capture piecewise CUDA graph end. Time elapsed: 7.83 s. mem usage=0.42 GB. avail mem=102.70 GB.")
    runner = web.AppRunner(build_app(a), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, a.host, a.port).start()
    log(f"Uvicorn running on http://{a.host}:{a.port} (Press CTRL+C to quit)")
    await asyncio.sleep(a.standin_ready_after)
    log("The server is fired up and ready to roll!")
    await asyncio.Event().wait()


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:2] == ["-m", "sglang.launch_server"]:
        args = args[2:]
    asyncio.run(main(args))
