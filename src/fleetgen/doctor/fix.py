"""`--fix DIR`: an env script, a machine-readable fix.json, and a CUDA_HOME overlay of symlinks fleetgen owns.

Nothing outside DIR is written: site-packages and system directories are only ever link targets.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from fleetgen.doctor.cuda_toolkit import OVERLAY_MARKER
from fleetgen.doctor.report import DoctorReport, OverlayPlan, Status
from fleetgen.errors import FleetgenError

ENV_SCRIPT = "env.sh"
FIX_JSON = "fix.json"
OVERLAY_DIR = "cuda"


@dataclass
class FixPlan:
    """The union of every non-passing check's fix."""

    env: dict[str, str] = field(default_factory=dict)
    prepend: dict[str, list[str]] = field(default_factory=dict)
    engine_args: list[str] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)
    overlay: OverlayPlan | None = None


def plan_fix(report: DoctorReport, fix_dir: Path) -> FixPlan:
    plan = FixPlan()
    overlay_root = fix_dir / OVERLAY_DIR
    for c in report.checks:
        if c.status not in (Status.WARN, Status.FAIL) or c.fix is None:
            continue
        plan.env.update(c.fix.env)
        for var, dirs in c.fix.prepend.items():
            have = plan.prepend.setdefault(var, [])
            have += [d for d in dirs if d not in have]
        _merge_args(plan.engine_args, c.fix.engine_args)
        plan.commands += [x for x in c.fix.commands if x not in plan.commands]
        if c.fix.overlay and report.overlay is not None:
            plan.overlay = report.overlay
    if plan.overlay is not None:
        plan.env.update(CUDA_HOME=str(overlay_root), CUDA_PATH=str(overlay_root))
        path = plan.prepend.setdefault("PATH", [])
        if str(overlay_root / "bin") not in path:
            path.insert(0, str(overlay_root / "bin"))
    return plan


def _merge_args(into: list[str], args: list[str]) -> None:
    """Append flag/value pairs, keeping the first value given for a flag."""
    i = 0
    while i < len(args):
        flag, has_value = args[i], i + 1 < len(args) and not args[i + 1].startswith("--")
        pair = args[i : i + 2] if has_value else [flag]
        if flag not in into:
            into += pair
        i += len(pair)


@dataclass(frozen=True)
class FixResult:
    env_script: Path
    fix_json: Path
    overlay: Path | None
    plan: FixPlan


def write_fix(report: DoctorReport, fix_dir: str | Path, *, env: Mapping[str, str] | None = None) -> FixResult:
    """Write DIR/env.sh, DIR/fix.json and (when needed) the DIR/cuda overlay; idempotent."""
    fix_dir = Path(fix_dir).expanduser().resolve()
    env = os.environ if env is None else env
    overlay_root = fix_dir / OVERLAY_DIR
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if env.get(var) and Path(env[var]).resolve() == overlay_root.resolve():
            raise FleetgenError(
                f"{var} already points at {overlay_root}, the overlay this fix would rebuild",
                hint="run the doctor without sourcing that env script, or write the fix to another directory",
            )
    if overlay_root.exists() and not (overlay_root / OVERLAY_MARKER).exists():
        raise FleetgenError(
            f"{overlay_root} exists and is not a fleetgen overlay", hint="choose an empty --fix directory"
        )
    plan = plan_fix(report, fix_dir)
    fix_dir.mkdir(parents=True, exist_ok=True)
    if overlay_root.exists():
        shutil.rmtree(overlay_root)
    if plan.overlay is not None:
        build_overlay(plan.overlay, overlay_root)
    fix_json = fix_dir / FIX_JSON
    fix_json.write_text(
        json.dumps(
            {
                "schema_version": 1,
                "env": plan.env,
                "prepend": plan.prepend,
                "engine_args": plan.engine_args,
                "commands": plan.commands,
                "overlay": str(overlay_root) if plan.overlay else None,
            },
            indent=2,
        )
        + "\n",
        encoding="utf-8",
    )
    script = fix_dir / ENV_SCRIPT
    script.write_text(render_env_script(plan, report, script), encoding="utf-8")
    return FixResult(env_script=script, fix_json=fix_json, overlay=overlay_root if plan.overlay else None, plan=plan)


def render_env_script(plan: FixPlan, report: DoctorReport, script: Path) -> str:
    lines = [
        "# Written by `fleetgen doctor --fix`; source it before starting an engine:  . " + shlex.quote(str(ENV_SCRIPT)),
        f"# {datetime.now(UTC).isoformat(timespec='seconds')}; fixes: "
        + ", ".join(c.id for c in report.checks if c.fix and c.status in (Status.WARN, Status.FAIL)),
    ]
    for var, value in plan.env.items():
        lines.append(f"export {var}={shlex.quote(value)}")
    for var, dirs in plan.prepend.items():
        joined = shlex.quote(":".join(dirs))
        lines.append(f'export {var}={joined}"${{{var}:+:${var}}}"')
    if plan.engine_args:
        lines.append(f"export FLEETGEN_ENGINE_ARGS={shlex.quote(shlex.join(plan.engine_args))}")
    if plan.commands:
        lines.append("# Not applied (package changes are yours to make); run, then `fleetgen doctor` again:")
        lines += [f"#   {c}" for c in plan.commands]
    return "\n".join(lines) + "\n"


def build_overlay(plan: OverlayPlan, root: Path) -> None:
    """Make `root` a CUDA_HOME of symlinks; every directory under it is real, so no link is written through."""
    root.mkdir(parents=True)
    (root / OVERLAY_MARKER).write_text(plan.model_dump_json(indent=2) + "\n", encoding="utf-8")
    built = {k for k in plan.mirror if k}
    for sub, sources in plan.mirror.items():
        d = root / sub
        d.mkdir(parents=True, exist_ok=True)
        for src in sources:
            for entry in sorted(os.listdir(src)):
                if (sub == "" and entry in built) or entry == OVERLAY_MARKER:
                    continue
                t = d / entry
                if not os.path.lexists(t):
                    t.symlink_to(Path(src) / entry)
    for rel, target in plan.links.items():
        p = root / rel
        _real_dirs(root, p.parent)
        if os.path.lexists(p):
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink()
        p.symlink_to(target)


def _real_dirs(root: Path, d: Path) -> None:
    """Turn each component of `d` below `root` into a real directory (a symlinked one becomes a dir of links)."""
    cur = root
    for part in d.relative_to(root).parts:
        cur = cur / part
        if cur.is_symlink():
            target = cur.resolve()
            cur.unlink()
            cur.mkdir()
            if target.is_dir():
                for e in sorted(os.listdir(target)):
                    (cur / e).symlink_to(target / e)
        elif not cur.exists():
            cur.mkdir()
    if not d.resolve().is_relative_to(root.resolve()):
        raise FleetgenError(f"refusing to write outside the overlay: {d}")


def read_fix(fix_dir: str | Path) -> dict:
    p = Path(fix_dir) / FIX_JSON
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FleetgenError(
            f"no fix at {fix_dir} ({FIX_JSON} missing)", hint="run `fleetgen doctor --fix DIR` first"
        ) from None


def env_for_replicas(fix_dir: str | Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables the env script would export, with prepends applied to `base` (default: this process's env)."""
    fix = read_fix(fix_dir)
    base = os.environ if base is None else base
    out = dict(fix["env"])
    for var, dirs in fix["prepend"].items():
        out[var] = ":".join(dirs + ([base[var]] if base.get(var) else []))
    return out


def engine_args_for_replicas(fix_dir: str | Path) -> list[str]:
    """Engine flags the fix asks for (e.g. --attention-backend flashinfer)."""
    return list(read_fix(fix_dir)["engine_args"])
