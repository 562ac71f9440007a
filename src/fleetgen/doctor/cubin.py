"""flashinfer's prebuilt kernels (flashinfer-cubin): without them every kernel is JIT-compiled on first use.

flashinfer-python ships sources; its sampling, attention and norm kernels come either from the
flashinfer-cubin wheel (prebuilt, matched to flashinfer's version) or from an nvcc JIT compile
the first time each one is used. SGLang 0.5.12 pins flashinfer_cubin==0.6.11.post1 next to
flashinfer_python, but a staged install can leave it out: on the H200 (2026-12-02) it was absent,
and the first request with top_p < 1 then waited minutes for flashinfer's top-k/top-p sampling
kernel, a greedy request behind it, and the first with prompt
logprobs as long (BENCHMARKS.md, "figures the code cites").
"""

from __future__ import annotations

from fleetgen.doctor.host import JSON_MARKER, Host
from fleetgen.doctor.report import Check, Fix, Status

_PROBE = f"""
import importlib.metadata as md, json, sys
out = {{}}
for d in ("flashinfer-python", "flashinfer-cubin", "flashinfer-jit-cache", "sglang", "vllm"):
    try:
        out[d] = md.version(d)
    except md.PackageNotFoundError:
        pass
sys.stdout.write({JSON_MARKER!r} + json.dumps(out) + "\\n")
"""

COST = (
    "flashinfer then JIT-compiles its sampling and attention kernels on their first use: minutes per kernel "
    "family with nvcc, every request waiting behind it"
)


def probe_flashinfer(host: Host) -> dict[str, str]:
    """Installed versions of flashinfer's packages (and the
    engines) in the target interpreter; `probe_error` if none."""
    got = host.python_json(_PROBE)
    return {k: v for k, v in got.items() if isinstance(v, str)} if isinstance(got, dict) else {}


def check_cubin(versions: dict[str, str]) -> Check:
    """OK when flashinfer-cubin matches flashinfer-python, WARN when it is absent or another version."""
    versions = dict(versions)
    probe_error = versions.pop("probe_error", None)
    if probe_error:
        return Check(id="kernels.flashinfer_cubin", status=Status.SKIP, cause="probe_failed", summary=probe_error)
    fi = versions.get("flashinfer-python")
    evidence: dict[str, object] = dict(versions)
    if fi is None:
        return Check(
            id="kernels.flashinfer_cubin",
            status=Status.SKIP,
            cause="no_flashinfer",
            evidence=evidence,
            summary="flashinfer is not installed: nothing to check",
        )
    install = Fix(
        summary=f"install flashinfer-cubin {fi} (the prebuilt kernels of flashinfer {fi})",
        commands=[f"pip install 'flashinfer-cubin=={fi}'"],
    )
    cubin = versions.get("flashinfer-cubin")
    if cubin is None:
        return Check(
            id="kernels.flashinfer_cubin",
            status=Status.WARN,
            cause="flashinfer_cubin_missing",
            evidence=evidence,
            fix=install,
            summary=f"flashinfer {fi} is installed without flashinfer-cubin: {COST}; "
            f"install flashinfer-cubin=={fi} (`fleetgen generate` warms the job's sampling paths "
            "before work is sent, so the wait moves into its warm-up)",
        )
    if cubin != fi:
        return Check(
            id="kernels.flashinfer_cubin",
            status=Status.WARN,
            cause="flashinfer_cubin_mismatch",
            evidence=evidence,
            fix=install,
            summary=f"flashinfer-cubin {cubin} does not match flashinfer {fi}: its kernels are not used, so "
            f"{COST}; install flashinfer-cubin=={fi}",
        )
    return Check(
        id="kernels.flashinfer_cubin",
        status=Status.OK,
        evidence=evidence,
        summary=f"flashinfer-cubin {cubin} matches flashinfer {fi}: prebuilt kernels, no first-use JIT",
    )
