"""The Ray backend waits on its actors side by side: a hung node holds up no other replica, and `down`
stops a fleet in about one grace period, not one per replica.

A one-node Ray cluster; the actors are stand-ins named as such (a node that never answers, a
"server" that is a `python -c` sleeper ignoring SIGTERM); the readiness side is the SGLang stand-in
server through fleetgen's real `wait_ready`.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

import fleetgen
from fleetgen.fleet import down, verify
from fleetgen.fleet.engines import Phase
from fleetgen.fleet.process import stop_processes
from fleetgen.fleet.state import FleetState, ReplicaState, write_state

ray = pytest.importorskip("ray")
ray_backend = pytest.importorskip("fleetgen.fleet.ray_backend")
sys.path.insert(0, str(Path(__file__).parent / "sglang"))
from test_sglang_protocol import StandinSglang, config, free_port, start  # noqa: E402

GRACE_S = 3.0
IGNORES_SIGTERM = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(600)"
)


@pytest.fixture(scope="module")
def one_node():
    if ray.is_initialized():
        ray.shutdown()
    # The stand-in actors below live in this module: the workers import it (and this tree's fleetgen) by path.
    paths = [str(Path(fleetgen.__file__).parents[1]), str(Path(__file__).parent), str(Path(__file__).parent / "sglang")]
    ray.init(
        num_cpus=4,
        namespace=ray_backend.NAMESPACE,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": ":".join(paths), "RAY_memory_monitor_refresh_ms": "0"}},
    )
    yield
    ray.shutdown()


@ray.remote
class HungNode:
    """Stand-in for a replica's actor on a node that stopped answering: every call hangs."""

    def poll(self) -> None:
        time.sleep(3600)

    def read_log(self, offset: int) -> bytes:
        time.sleep(3600)
        return b""


@ray.remote
class StubbornServer:
    """Stand-in for a replica's actor whose server ignores SIGTERM; stops it as `ReplicaServer.stop` does."""

    def __init__(self, times: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", IGNORES_SIGTERM], stdout=subprocess.PIPE, start_new_session=True
        )
        self.proc.stdout.readline()  # SIGTERM is ignored from here on
        self.ctime = psutil.Process(self.proc.pid).create_time()
        self.times = times

    def pid(self) -> int:
        return self.proc.pid

    def stop(self, grace_s: float) -> int:
        t0 = time.time()
        stopped = stop_processes([(self.proc.pid, self.ctime)], grace_s=grace_s)
        with open(self.times, "a") as f:
            f.write(f"{t0} {time.time()}\n")
        return len(stopped)


def test_a_hung_node_does_not_hold_up_another_replicas_readiness(one_node, tmp_path):
    engine = StandinSglang()
    good, proc, _ = start(engine, tmp_path)
    hung = HungNode.remote()
    hung_replica = good.model_copy(update={"index": 1, "endpoint": f"http://127.0.0.1:{free_port()}"})
    seen: dict[int, list[Phase]] = {0: [], 1: []}

    async def scenario() -> float:
        progress = lambda p: seen[p.index].append(p.phase)  # noqa: E731
        waiting = asyncio.ensure_future(
            verify.wait_ready(
                engine,
                hung_replica,
                ray_backend.actor_liveness(hung),
                config(tmp_path),
                None,
                progress,
                follower=ray_backend.ActorLogFollower(hung, "/nonexistent/replica-1.log"),
            )
        )
        await asyncio.sleep(0.5)  # the hung replica's first log read is in flight
        t0 = time.monotonic()
        await verify.wait_ready(engine, good, proc, config(tmp_path), None, progress)
        took = time.monotonic() - t0
        assert not waiting.done(), "the hung replica cannot have answered"
        waiting.cancel()
        return took

    try:
        took = asyncio.run(scenario())
    finally:
        stop_processes([(good.pid, good.create_time, good.boot_time)], grace_s=2)
        ray.kill(hung)
    # Blocking on the hung actor would hold the loop for ACTOR_CALL_TIMEOUT_S (30 s) per call.
    assert seen[0][-1] == Phase.READY and took < ray_backend.ACTOR_CALL_TIMEOUT_S / 2
    assert Phase.READY not in seen[1]


def test_an_actor_call_that_times_out_means_unsure_not_dead(one_node, monkeypatch):
    monkeypatch.setattr(ray_backend, "ACTOR_CALL_TIMEOUT_S", 1.0)
    hung = HungNode.remote()

    async def ask() -> tuple[str | None, list[str]]:
        return await ray_backend.actor_liveness(hung)(), await ray_backend.ActorLogFollower(hung, "/x.log").new_lines()

    t0 = time.monotonic()
    try:
        assert asyncio.run(ask()) == (None, [])  # the stall timeout decides, not one slow answer
    finally:
        ray.kill(hung)
    assert time.monotonic() - t0 < 10


def _replica(index: int, pid: int, tmp: Path, **kw) -> ReplicaState:
    return ReplicaState(
        index=index,
        endpoint="http://127.0.0.1:1",
        pid=pid,
        create_time=psutil.Process(pid).create_time(),
        engine="vllm",
        model="m",
        served_model_name="m",
        log_path=str(tmp / "log"),
        command=["stand-in"],
        **kw,
    )


def test_down_stops_every_replica_at_once(one_node, tmp_path):
    fleet_id = "seamtest"
    times = tmp_path / "stops.txt"
    names = [f"fleetgen-{fleet_id}-replica-{i}-standin" for i in range(3)]
    actors = [StubbornServer.options(name=n, namespace=ray_backend.NAMESPACE).remote(str(times)) for n in names]
    pids = ray.get([a.pid.remote() for a in actors])
    state = FleetState(
        engine="vllm",
        model="m",
        served_model_name="m",
        backend="ray",
        fleet_id=fleet_id,
        ray_address=ray.get_runtime_context().gcs_address,
        replicas=[_replica(i, pid, tmp_path, actor=n) for i, (n, pid) in enumerate(zip(names, pids))],
    )
    write_state(tmp_path, state)
    t0 = time.monotonic()
    stopped = down(tmp_path, grace_s=GRACE_S)
    took = time.monotonic() - t0
    spans = sorted(tuple(map(float, line.split())) for line in times.read_text().splitlines())
    assert stopped == 3 and len(spans) == 3
    assert all(end - begin >= GRACE_S * 0.9 for begin, end in spans), "each server outlasted SIGTERM for the grace"
    # Overlapping, not one after another: each stop began before the one before it ended.
    assert all(later[0] < earlier[1] for earlier, later in zip(spans, spans[1:]))
    assert took < 1.8 * GRACE_S
    assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


def test_local_down_stops_every_replica_at_once(tmp_path):
    procs = [
        subprocess.Popen([sys.executable, "-c", IGNORES_SIGTERM], stdout=subprocess.PIPE, start_new_session=True)
        for _ in range(3)
    ]
    for p in procs:
        p.stdout.readline()
    replicas = [_replica(i, p.pid, tmp_path) for i, p in enumerate(procs)]
    write_state(tmp_path, FleetState(engine="vllm", model="m", served_model_name="m", replicas=replicas))
    t0 = time.monotonic()
    stopped = down(tmp_path, grace_s=GRACE_S)
    took = time.monotonic() - t0
    assert stopped == 3 and all(p.poll() is not None for p in procs)
    # At once: any two stops one after the other take two graces, so anything under that is concurrent, and the
    # whole grace is left for a loaded machine's process reaping (1.8 graces left it 2.4 s).
    assert GRACE_S * 0.9 <= took < 2 * GRACE_S
