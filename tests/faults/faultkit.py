"""Shared parts of the fault campaign: the output audit, the results recorder, the faulty stand-in, the CLI."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import orjson
from aiohttp import web
from standin_server import StandinServer

from fleetgen.generate import GenerateConfig

REPO = Path(__file__).resolve().parents[2]
RESULTS_DIR = Path(os.environ.get("FLEETGEN_FAULTS_RESULTS", REPO / "out" / "faults"))


# --- audit -------------------------------------------------------------------------------


@dataclass
class Audit:
    """What an output directory holds against what it should: counted, not asserted, so it can be reported."""

    expected: int
    results: int = 0
    errors: int = 0
    lost: int = 0
    duplicated: int = 0
    corrupt: int = 0
    torn_tail: bool = False
    error_reasons: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return self.lost == 0 and self.duplicated == 0 and self.corrupt == 0

    def assert_clean(self) -> None:
        assert self.clean, f"lost {self.lost}, duplicated {self.duplicated}, corrupt {self.corrupt}"


def _lines(path: Path) -> tuple[list[dict], int, bool]:
    """(parsed lines, unparsable complete lines, torn tail: last bytes without a newline)."""
    if not path.exists():
        return [], 0, False
    data = path.read_bytes()
    torn = bool(data) and not data.endswith(b"\n")
    body = data if not torn else data[: data.rfind(b"\n") + 1]
    good, bad = [], 0
    for line in body.splitlines():
        try:
            good.append(orjson.loads(line))
        except orjson.JSONDecodeError:
            bad += 1
    return good, bad + (1 if torn else 0), torn


def audit(outdir: Path, ids: list[str], samples: int) -> Audit:
    """Every (id, sample) once across results and per-sample errors; every line must parse."""
    results, bad_r, torn_r = _lines(outdir / "results.jsonl")
    errors, bad_e, torn_e = _lines(outdir / "errors.jsonl")
    per_sample = [e for e in errors if e.get("sample") is not None]
    keys = Counter((r["id"], r["sample"]) for r in results + per_sample)
    expected = {(i, s) for i in ids for s in range(samples)}
    return Audit(
        expected=len(expected),
        results=len(results),
        errors=len(per_sample),
        lost=len(expected - set(keys)),
        duplicated=sum(c - 1 for c in keys.values() if c > 1) + len(set(keys) - expected),
        corrupt=bad_r + bad_e,
        torn_tail=torn_r or torn_e,
        error_reasons=[e.get("reason", "") for e in errors],
    )


# --- recording rows of RELIABILITY.md -----------------------------------------------------


class Recorder:
    def record(
        self, key: str, *, fault: str, injected: str, runs: int, audit: Audit, outcome: str, extra: dict | None = None
    ) -> None:
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        row = {
            "key": key,
            "fault": fault,
            "injected": injected,
            "runs": runs,
            "rows": audit.expected,
            "lost": audit.lost,
            "duplicated": audit.duplicated,
            "corrupt": audit.corrupt,
            "outcome": outcome,
            "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
            **(extra or {}),
        }
        (RESULTS_DIR / f"{key}.json").write_text(json.dumps(row, indent=2))


# --- the faulty stand-in --------------------------------------------------------------------


class FaultyStandin(StandinServer):
    """A STAND-IN server (tests/generate/standin_server.py) that answers some requests with a named fault.

    `fault` is one of: 500, 429, garbage (200 with a body that is not JSON), truncated (a body cut
    before its Content-Length, then the connection closed), hang (never answers, never closes).
    Request n (1-based) gets the fault when n % every == 0, or for every request when every == 1.
    """

    def __init__(self, fault: str, every: int = 3, **kw) -> None:
        super().__init__(**kw)
        self.fault = fault
        self.every = every
        self.faults = 0
        self._faulty = 0

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        self._faulty += 1
        if self._faulty % self.every:
            return await super()._chat(request)
        await request.read()
        self.faults += 1
        if self.fault == "500":
            return web.json_response({"error": {"message": "stand-in: scripted 500"}}, status=500)
        if self.fault == "429":
            return web.json_response(
                {"error": {"message": "stand-in: too many requests"}}, status=429, headers={"Retry-After": "0"}
            )
        if self.fault == "garbage":
            return web.Response(body=b"<html>\x00\xffnot json at all", status=200, content_type="application/json")
        if self.fault == "truncated":
            resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json", "Content-Length": "400"})
            await resp.prepare(request)
            await resp.write(b'{"id":"standin-cut","object":"chat.completion","choices":[{"index":0,"mess')
            request.transport.close()  # type: ignore[union-attr]
            return resp
        if self.fault == "hang":
            await asyncio.sleep(3600)  # holds the connection open, answers nothing
        raise AssertionError(f"unknown fault {self.fault!r}")


# --- running the client --------------------------------------------------------------------


def gen_config(tmp: Path, endpoints: list[str], **kw) -> GenerateConfig:
    base = dict(
        prompts=tmp / "p.jsonl",
        output_dir=tmp / "out",
        endpoints=endpoints,
        max_tokens=8,
        concurrency=8,
        timeout_base_s=2.0,
        timeout_per_token_s=0.0,
        backoff_base_s=0.02,
        backoff_max_s=0.1,
        replica_cooldown_s=0.2,
        hedge=False,
        commit_interval_s=0.0,
        model="standin",
        warmup=False,  # the faults here hit the job's own requests (tests/generate/test_warmup.py: the warm-up's)
    )
    base.update(kw)
    return GenerateConfig(**base)


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "fleetgen.cli.app", *args]


def run_cli(*args: str, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(cli(*args), capture_output=True, text=True, timeout=timeout, env=env)


def write_yaml(path: Path, data: dict) -> Path:
    import yaml

    path.write_text(yaml.safe_dump({k: (str(v) if isinstance(v, Path) else v) for k, v in data.items()}))
    return path


def asdict_audit(a: Audit) -> dict:
    return {k: v for k, v in asdict(a).items() if k != "error_reasons"}
