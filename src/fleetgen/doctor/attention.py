"""Attention backend for the engine on this GPU architecture, and the flags a hybrid (Mamba) model needs."""

from __future__ import annotations

from fleetgen.doctor.gpus import NvmlSnapshot, sm
from fleetgen.doctor.modelinfo import ModelInfo
from fleetgen.doctor.report import Check, Fix, Status

# SGLang --attention-backend values and the architectures (major*10+minor, inclusive range) they run on.
SGLANG_BACKENDS = {
    "fa3": (80, 90),
    "fa4": (90, 103),
    "flashinfer": (75, 129),
    "triton": (75, 129),
    "torch_native": (0, 999),
    "trtllm_mha": (100, 103),
    "trtllm_mla": (100, 103),
    "flashmla": (90, 103),
    "cutlass_mla": (100, 103),
}
VLLM_BACKENDS = {
    "FLASH_ATTN": (80, 129),
    "FLASHINFER": (75, 129),
    "TRITON_ATTN": (75, 129),
    "FLASHMLA": (90, 103),
    "CUTLASS_MLA": (100, 103),
    "FLASH_ATTN_MLA": (90, 90),
    "TORCH_SDPA": (0, 999),
}
SGLANG_BACKEND_FLAGS = ("--attention-backend", "--prefill-attention-backend", "--decode-attention-backend")


def _flag_values(args: list[str], flags: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for i, a in enumerate(args):
        for f in flags:
            if a == f and i + 1 < len(args):
                out[f] = args[i + 1]
            elif a.startswith(f + "="):
                out[f] = a.split("=", 1)[1]
    return out


def recommended_backend(engine: str, cc: tuple[int, int]) -> str | None:
    """The backend to pin explicitly, or None where the engine's own default is right for this arch."""
    n = cc[0] * 10 + cc[1]
    if engine == "sglang" and n >= 110:
        return "flashinfer"  # SGLang may pick fa3/fa4 (hybrid models) which do not run on consumer Blackwell
    return None


def check_attention(engine: str | None, snap: NvmlSnapshot, engine_args: list[str], env: dict[str, str]) -> Check:
    if not snap.gpus:
        return Check(
            id="attention.backend", status=Status.SKIP, cause="no_gpu", summary="no GPU: the CPU engine has one backend"
        )
    if engine is None:
        return Check(
            id="attention.backend",
            status=Status.SKIP,
            cause="no_engine",
            summary="pass --engine to check its attention backend",
        )
    archs = snap.archs
    nums = [a[0] * 10 + a[1] for a in archs]
    table = SGLANG_BACKENDS if engine == "sglang" else VLLM_BACKENDS
    chosen = _flag_values(engine_args, SGLANG_BACKEND_FLAGS if engine == "sglang" else ("--attention-backend",))
    if engine == "vllm" and env.get("VLLM_ATTENTION_BACKEND"):
        chosen.setdefault("VLLM_ATTENTION_BACKEND", env["VLLM_ATTENTION_BACKEND"])
    ev = {"engine": engine, "archs": [sm(a) for a in archs], "chosen": chosen}
    rec = recommended_backend(engine, archs[-1])
    for flag, value in chosen.items():
        rng = table.get(value if engine == "sglang" else value.upper())
        if rng and not all(rng[0] <= n <= rng[1] for n in nums):
            alt = rec or ("flashinfer" if engine == "sglang" else "FLASHINFER")
            return Check(
                id="attention.backend",
                status=Status.FAIL,
                cause="attention_backend_unsupported",
                evidence=ev,
                summary=f"{flag} {value} does not run on {', '.join(sm(a) for a in archs)} ({value} needs "
                f"sm_{rng[0]}..sm_{rng[1]})",
                fix=Fix(
                    summary=f"use {alt}", engine_args=[flag if flag.startswith("--") else "--attention-backend", alt]
                ),
            )
    if rec and not chosen:
        return Check(
            id="attention.backend",
            status=Status.WARN,
            cause="attention_backend_unpinned",
            evidence=ev,
            summary=f"{engine} may default to FA3/FA4 on {sm(archs[-1])}, which they do not support: pin "
            f"--attention-backend {rec}",
            fix=Fix(summary=f"pass --attention-backend {rec}", engine_args=["--attention-backend", rec]),
        )
    return Check(
        id="attention.backend",
        status=Status.OK,
        evidence=ev,
        summary=(
            f"{', '.join(f'{k} {v}' for k, v in chosen.items())} runs on {', '.join(sm(a) for a in archs)}"
            if chosen
            else f"{engine}'s default attention backend supports {', '.join(sm(a) for a in archs)}"
        ),
    )


def hybrid_flags(engine: str, model: ModelInfo) -> list[str]:
    """Flags a hybrid Mamba/attention model needs: fp32 recurrent state, and a scheduler that keeps prefix caching."""
    dtype = str(model.config.get("mamba_ssm_dtype") or "float32")
    if engine == "sglang":
        return ["--mamba-ssm-dtype", dtype, "--mamba-scheduler-strategy", "extra_buffer"]
    return ["--mamba-ssm-cache-dtype", dtype]


def check_hybrid(engine: str | None, model: ModelInfo | None, engine_args: list[str]) -> Check | None:
    if model is None or engine is None or not model.is_hybrid:
        return None
    want = hybrid_flags(engine, model)
    flags = want[::2]
    have = _flag_values(engine_args, tuple(flags))
    missing = [f for f in flags if f not in have]
    ev = {
        "model_type": model.model_type,
        "attention_layers": model.attention_layers,
        "layers": model.config.get("num_hidden_layers"),
        "passed": have,
    }
    if not missing:
        return Check(
            id="attention.hybrid",
            status=Status.OK,
            evidence=ev,
            summary=f"hybrid model ({model.model_type}): {' '.join(f'{k} {v}' for k, v in have.items())}",
        )
    args = [x for i in range(0, len(want), 2) if want[i] in missing for x in want[i : i + 2]]
    return Check(
        id="attention.hybrid",
        status=Status.WARN,
        cause="hybrid_flags_missing",
        evidence=ev,
        summary=f"hybrid Mamba/attention model ({model.model_type}, {model.attention_layers}/{ev['layers']} attention "
        f"layers): pass {' '.join(args)}",
        fix=Fix(summary=f"pass {' '.join(args)}", engine_args=args),
    )
