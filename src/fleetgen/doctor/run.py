"""`run_doctor`: every check, in order, against one Host."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from fleetgen.doctor.attention import check_attention, check_hybrid
from fleetgen.doctor.config import DoctorConfig
from fleetgen.doctor.cubin import check_cubin, probe_flashinfer
from fleetgen.doctor.cuda_toolkit import inspect_toolchain, overlay_plan
from fleetgen.doctor.engine_import import check_engine_import, probe_import
from fleetgen.doctor.gpus import check_gpus
from fleetgen.doctor.host import Host
from fleetgen.doctor.kernels import check_kernels, check_loader, probe_kernels
from fleetgen.doctor.memory import check_memory
from fleetgen.doctor.modelinfo import ModelInfo, read_model
from fleetgen.doctor.report import Check, DoctorReport, Status
from fleetgen.doctor.token_path import check_token_path
from fleetgen.doctor.toolchain import check_toolchain
from fleetgen.doctor.torch_check import check_torch, probe_torch
from fleetgen.errors import FleetgenError


def run_doctor(config: DoctorConfig, host: Host | None = None) -> DoctorReport:
    """Diagnose the GPU/CUDA/engine environment; never raises for what it finds, only reports it."""
    host = host or Host()
    if config.python:
        host = replace(host, python=config.python)
    snap = host.nvml()
    checks: list[Check] = [check_gpus(snap)]
    torch = probe_torch(host)
    checks += check_torch(torch, snap, host.python)
    tcuda = torch.cuda_version
    checks.append(check_loader(host, snap, tcuda))
    if config.engine:
        kernels = probe_kernels(host, config.engine)
        checks.append(check_kernels(kernels, config.engine, host, snap, torch.version, tcuda))
        checks.append(check_token_path(config.engine, kernels.versions))
        checks.append(check_cubin(probe_flashinfer(host)))
        if (
            snap.gpus
        ):  # the whole server import: slow (BENCHMARKS.md), and only GPU machines start these engines' servers
            checks.append(check_engine_import(probe_import(host, config.engine), config.engine, host))
    else:
        checks.append(
            Check(
                id="kernels",
                status=Status.SKIP,
                cause="no_engine",
                summary="pass --engine sglang or --engine vllm to check the engine's kernels",
            )
        )
    tc = inspect_toolchain(host) if snap.gpus else None
    checks += check_toolchain(tc, snap, tcuda, host)
    checks.append(check_attention(config.engine, snap, config.engine_args, dict(host.env)))
    model, model_check = _model(config)
    if model_check:
        checks.append(model_check)
    if model:
        hybrid = check_hybrid(config.engine, model, config.engine_args)
        if hybrid:
            checks.append(hybrid)
        checks.append(
            check_memory(
                model,
                snap,
                tp=config.tp,
                mem_fraction=config.mem_fraction,
                max_running_requests=config.max_running_requests,
                context_length=config.context_length,
            )
        )
    needs_overlay = any(c.fix and c.fix.overlay for c in checks if c.status in (Status.WARN, Status.FAIL))
    return DoctorReport(
        engine=config.engine,
        python=host.python,
        checks=checks,
        overlay=overlay_plan(tc, host) if tc and needs_overlay else None,
    )


def _model(config: DoctorConfig) -> tuple[ModelInfo | None, Check | None]:
    if not config.model:
        return None, None
    from fleetgen.models import resolve_model

    try:
        path = Path(resolve_model(config.model, prepare=False))
    except FleetgenError as e:
        return None, Check(
            id="model.read",
            status=Status.SKIP,
            cause="model_unavailable",
            summary=f"{e.message}",
            evidence={"model": config.model},
        )
    if not (path / "config.json").is_file():
        return None, Check(
            id="model.read",
            status=Status.SKIP,
            cause="model_not_local",
            evidence={"model": config.model},
            summary=f"{config.model} is not a local checkpoint directory: memory plan skipped",
        )
    try:
        return read_model(path), None
    except (OSError, ValueError) as e:
        return None, Check(
            id="model.read",
            status=Status.FAIL,
            cause="model_unreadable",
            evidence={"model": str(path)},
            summary=f"cannot read {path}/config.json: {e}",
        )
