"""Memory plan for a checkpoint: weights per GPU, KV-cache room at the memory fraction, and whether it fits."""

from __future__ import annotations

from fleetgen.doctor.gpus import NvmlSnapshot
from fleetgen.doctor.modelinfo import ModelInfo
from fleetgen.doctor.report import Check, Fix, Status

GIB = 2**30


def check_memory(
    model: ModelInfo,
    snap: NvmlSnapshot,
    *,
    tp: int,
    mem_fraction: float,
    max_running_requests: int | None,
    context_length: int | None,
) -> Check:
    if not snap.gpus:
        return Check(id="memory.plan", status=Status.SKIP, cause="no_gpu", summary="no GPU: no GPU memory to plan")
    gpu = min(snap.gpus, key=lambda g: g.memory_total)
    budget = gpu.memory_total * mem_fraction
    weights = model.weight_bytes / tp
    per_token = model.kv_bytes_per_token / tp
    room = budget - weights
    ctx = context_length or model.max_context
    ev = {
        "gpu": gpu.name,
        "gpu_gib": round(gpu.memory_total / GIB, 1),
        "mem_fraction": mem_fraction,
        "tp": tp,
        "weights_gib_per_gpu": round(weights / GIB, 2),
        "kv_room_gib": round(room / GIB, 2),
        "kv_bytes_per_token": int(per_token),
        "attention_layers": model.attention_layers,
        "context_length": ctx,
        "max_running_requests": max_running_requests,
    }
    if room <= 0:
        return Check(
            id="memory.plan",
            status=Status.FAIL,
            cause="weights_do_not_fit",
            evidence=ev,
            summary=f"weights take {weights / GIB:.1f} GiB per GPU, more than {mem_fraction:.2f} x "
            f"{gpu.memory_total / GIB:.0f} GiB",
            fix=Fix(summary="raise --tp, or the memory fraction, or use a quantized checkpoint"),
        )
    tokens = int(room // per_token) if per_token else 0
    ev["kv_tokens"] = tokens
    head = f"weights {weights / GIB:.1f} GiB/GPU, KV room {room / GIB:.1f} GiB = {tokens:,} tokens"
    if max_running_requests and ctx:
        need = max_running_requests * ctx
        ev["tokens_needed"] = need
        if tokens < need:
            fits = max(tokens // ctx, 0)
            return Check(
                id="memory.plan",
                status=Status.WARN,
                cause="kv_cache_too_small",
                evidence=ev,
                summary=f"{head}; {max_running_requests} requests x {ctx} context need {need:,}: only {fits} "
                "full-length requests fit",
                fix=Fix(summary=f"lower max-running-requests to {max(fits, 1)}, shorten the context, or raise --tp"),
            )
        return Check(
            id="memory.plan",
            status=Status.OK,
            evidence=ev,
            summary=f"{head}; holds {max_running_requests} x {ctx} ({need:,})",
        )
    return Check(
        id="memory.plan",
        status=Status.OK,
        evidence=ev,
        summary=head + (f" = {tokens // ctx} full {ctx}-token requests" if ctx else ""),
    )
