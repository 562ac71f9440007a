"""The engine's server module, imported in a subprocess: pin clashes that only show at import time.

Seen on the H200 image: sgl_kernel loads, every toolchain check passes, and yet
`import sglang.launch_server` fails with "'qwen3_asr' is already used by a Transformers config"
because the image's transformers 5.17 is not sglang 0.5.12's `transformers==5.6.0`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fleetgen.doctor.host import JSON_MARKER, Host
from fleetgen.doctor.report import Check, Fix, Status

# engine -> (the module `up` starts, the distribution whose requirements it was built against)
SERVER_MODULES = {
    "sglang": ("sglang.launch_server", "sglang"),
    "vllm": ("vllm.entrypoints.openai.api_server", "vllm"),
}

_PROBE = f"""
import importlib, importlib.metadata as md, json, sys, traceback
mod, dist = sys.argv[1], sys.argv[2]
out = {{"differs": [], "missing": []}}
try:
    try:
        from packaging.requirements import Requirement
    except ImportError:
        from pip._vendor.packaging.requirements import Requirement
    for line in md.requires(dist) or []:
        r = Requirement(line)
        if r.marker is not None and ("extra" in str(r.marker) or not r.marker.evaluate()):
            continue
        try:
            v = md.version(r.name)
        except md.PackageNotFoundError:
            out["missing"].append(str(r))
            continue
        if r.specifier and not r.specifier.contains(v, prereleases=True):
            out["differs"].append({{"name": r.name, "requirement": str(r), "installed": v}})
except Exception as e:
    out["requirements_error"] = type(e).__name__ + ": " + str(e)
try:
    importlib.import_module(mod)
    out["ok"] = True
except BaseException as e:
    out["ok"] = False
    out["error"] = type(e).__name__ + ": " + str(e)
    out["files"] = [f.filename for f in traceback.extract_tb(e.__traceback__)][-8:]
sys.stdout.write({JSON_MARKER!r} + json.dumps(out) + "\\n")
"""


@dataclass(frozen=True)
class ImportProbe:
    module: str
    dist: str
    ok: bool = False
    error: str | None = None
    files: tuple[str, ...] = ()
    differs: tuple[dict, ...] = ()
    missing: tuple[str, ...] = ()
    probe_error: str | None = None


def probe_import(host: Host, engine: str) -> ImportProbe:
    module, dist = SERVER_MODULES[engine]
    got = host.python_json(_PROBE, module, dist)
    if "probe_error" in got:
        return ImportProbe(module=module, dist=dist, probe_error=got["probe_error"])
    return ImportProbe(
        module=module,
        dist=dist,
        ok=bool(got.get("ok")),
        error=got.get("error"),
        files=tuple(got.get("files", ())),
        differs=tuple(got.get("differs", ())),
        missing=tuple(got.get("missing", ())),
    )


def _blamed(probe: ImportProbe) -> list[dict]:
    """Requirements that differ and whose package the error or its traceback names."""
    where = (probe.error or "") + "\n" + "\n".join(probe.files)
    out = []
    for d in probe.differs:
        pkg = re.escape(d["name"].lower().replace("-", "_"))
        if re.search(rf"(^|[/\\\s'\"(]){pkg}([/\\.\s'\")]|$)", where.lower().replace("-", "_"), re.M):
            out.append(d)
    return out


def check_engine_import(probe: ImportProbe, engine: str, host: Host) -> Check:
    cid = f"engine.import.{engine}"
    differs = [f"{d['requirement']} (installed {d['installed']})" for d in probe.differs]
    ev: dict[str, object] = {
        "module": probe.module,
        "python": host.python,
        "requirements_differ": differs,
        "requirements_missing": list(probe.missing),
        "error": probe.error,
        "traceback_files": list(probe.files),
    }
    if probe.probe_error:
        return Check(
            id=cid,
            status=Status.WARN,
            cause="probe_failed",
            evidence=ev,
            summary=f"could not import {probe.module} to check it: {probe.probe_error}",
        )
    if probe.ok:
        tail = (
            f"; differs from {probe.dist}'s requirements without breaking the import: {', '.join(differs)}"
            if differs
            else ""
        )
        return Check(id=cid, status=Status.OK, evidence=ev, summary=f"{probe.module} imports{tail}")
    first = (probe.error or "no message").splitlines()[0]
    if re.match(r"ModuleNotFoundError: No module named '([\w.]+)'", first):
        name = re.match(r"ModuleNotFoundError: No module named '([\w.]+)'", first).group(1)
        if probe.module == name or probe.module.startswith(name + "."):
            return Check(
                id=cid,
                status=Status.SKIP,
                cause="engine_not_installed",
                evidence=ev,
                summary=f"{probe.module} is not installed (kernels.{engine} says what to install)",
            )
    blamed = _blamed(probe)
    if blamed:
        pins = [d["requirement"].split(";")[0].strip() for d in blamed]
        return Check(
            id=cid,
            status=Status.FAIL,
            cause="requirement_mismatch",
            evidence=ev | {"blamed": pins},
            summary=f"{probe.module} does not import: {first}; {probe.dist} requires "
            + ", ".join(f"{d['requirement']} but {d['installed']} is installed" for d in blamed),
            fix=Fix(
                summary=f"install the versions {probe.dist} was released with",
                commands=[f"{host.python} -m pip install " + " ".join(f"'{p}'" for p in pins)],
            ),
        )
    return Check(
        id=cid,
        status=Status.FAIL,
        cause="import_error",
        evidence=ev,
        summary=f"{probe.module} does not import: {first}"
        + (f" (requirements that differ: {', '.join(differs)})" if differs else ""),
        fix=Fix(summary=f"read the error above; reinstalling {probe.dist} with its dependencies usually mends it"),
    )
