"""Keep a fleet alive while a job runs: restart a replica that died or hangs, in place."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from fleetgen.errors import FleetgenError
from fleetgen.fleet import probe
from fleetgen.fleet.backend import Backend
from fleetgen.fleet.backend_lookup import backend_for
from fleetgen.fleet.engines import Phase, get_engine
from fleetgen.fleet.launcher import restart_replica
from fleetgen.fleet.state import ReplicaState, read_state
from fleetgen.fleet.verify import ReplicaProgress


@dataclass
class SupervisorEvent:
    index: int
    # "dead", "hung", "restarted", "restart_failed", "gave_up", "restart_abandoned"; once the job has ended
    # and the fleet is kept (Supervisor.complete_restarts): "awaiting_restart", "restart_progress"
    kind: str
    detail: str = ""
    at: float = field(default_factory=time.time)


@dataclass
class _Watch:
    """What the supervisor remembers of one replica between checks."""

    last_tokens: float | None = None
    last_progress: float = field(default_factory=time.monotonic)
    unhealthy_since: float | None = None
    restarts: int = 0
    busy: bool = False


class Supervisor:
    """Use as `async with Supervisor(state_dir): ...`; the job's dispatcher re-sends lost requests."""

    def __init__(
        self,
        state_dir: Path,
        *,
        api_key: str | None = None,
        check_interval_s: float = 5.0,
        hang_timeout_s: float = 180.0,
        max_restarts: int = 3,
        backoff_s: float = 5.0,
        on_event: Callable[[SupervisorEvent], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.state_dir = Path(state_dir)
        self.api_key = api_key
        self.check_interval_s = check_interval_s
        self.hang_timeout_s = hang_timeout_s
        self.max_restarts = max_restarts
        self.backoff_s = backoff_s
        self.on_event = on_event
        self.clock = clock
        self.events: list[SupervisorEvent] = []
        self._watch: dict[int, _Watch] = {}
        self._task: asyncio.Task | None = None
        self._restarts: dict[asyncio.Task, int] = {}  # restarts in progress, and the replica of each
        self._backend: Backend | None = None
        self._completing = False  # the job has ended and the fleet is kept: restarts report their progress
        self._phases: dict[int, Phase] = {}

    @property
    def backend(self) -> Backend:
        """Local processes or Ray actors: who answers "alive?"; restarts go through `launcher.restart_replica`."""
        if self._backend is None:
            self._backend = backend_for(read_state(self.state_dir))
        return self._backend

    @property
    def restarts(self) -> dict[int, int]:
        return {i: w.restarts for i, w in self._watch.items() if w.restarts}

    async def __aenter__(self) -> Supervisor:
        self._task = asyncio.create_task(self._loop())
        return self

    @property
    def restarting(self) -> list[int]:
        """Replicas whose restart is under way (waiting out its back-off, or starting)."""
        return sorted(i for t, i in self._restarts.items() if not t.done())

    async def complete_restarts(self, timeout_s: float | None = None) -> list[int]:
        """The job ended and its fleet is kept: finish what is under way, so the kept fleet is whole.

        Stops watching for hangs (the fleet is idle now), restarts a replica found dead at this
        moment, and waits for every restart under way, for at most `timeout_s` (default: the longest
        back-off plus the fleet's replica start timeout); one still starting then is cancelled.
        Returns the replicas that are not running afterwards (a failed restart, or given up).
        """
        self._completing = True
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        state = read_state(self.state_dir)
        for replica in state.replicas:
            watch = self._watch.setdefault(replica.index, _Watch())
            if not watch.busy and not await asyncio.to_thread(self.backend.alive, replica):
                self._restart(replica.index, watch, "dead", f"pid {replica.pid} is gone")
        startup_s = float(state.config.get("startup_timeout_s", 1200))
        pending = {t: i for t, i in self._restarts.items() if not t.done()}
        if pending:
            bound = timeout_s if timeout_s is not None else self.backoff_s * 2**self.max_restarts + startup_s + 30
            for index in sorted(pending.values()):
                self._emit(
                    SupervisorEvent(
                        index,
                        "awaiting_restart",
                        f"the job ended and the fleet is kept: waiting up to {bound:.0f}s for its restart",
                    )
                )
            _, late = await asyncio.wait(pending, timeout=bound)
            for task in late:
                self._emit(
                    SupervisorEvent(
                        pending[task], "restart_abandoned", f"not ready within {bound:.0f}s; the kept fleet lacks it"
                    )
                )
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        state = read_state(self.state_dir)
        return [r.index for r in state.replicas if not await asyncio.to_thread(self.backend.alive, r)]

    async def __aexit__(self, *exc) -> None:
        # The job ended first (the survivors finished the rows): say so, or the log shows a death and no restart.
        for index in self.restarting:
            self._emit(
                SupervisorEvent(
                    index, "restart_abandoned", "the job ended while it was still restarting; the restart is cancelled"
                )
            )
        for task in [self._task, *self._restarts]:
            if task:
                task.cancel()
        await asyncio.gather(*(t for t in [self._task, *self._restarts] if t), return_exceptions=True)

    def _emit(self, event: SupervisorEvent) -> None:
        self.events.append(event)
        if self.on_event:
            self.on_event(event)

    async def _loop(self) -> None:
        engine = get_engine(read_state(self.state_dir).engine)
        async with aiohttp.ClientSession(headers=probe.auth_headers(self.api_key)) as session:
            while True:
                state = read_state(self.state_dir)
                await asyncio.gather(*(self.check(session, engine, r) for r in state.replicas))
                await asyncio.sleep(self.check_interval_s)

    async def check(self, session: aiohttp.ClientSession, engine, replica: ReplicaState) -> None:
        watch = self._watch.setdefault(replica.index, _Watch())
        if watch.busy:
            return
        now = self.clock()
        if not await asyncio.to_thread(self.backend.alive, replica):
            return self._restart(
                replica.index,
                watch,
                "dead",
                f"pid {replica.pid} is gone" + (f" (node {replica.node})" if replica.node else ""),
            )
        code, _ = await probe.health(session, replica.endpoint, engine, timeout=10)
        if code != 200:
            watch.unhealthy_since = watch.unhealthy_since or now
            if now - watch.unhealthy_since > self.hang_timeout_s:
                return self._restart(
                    replica.index, watch, "hung", f"health failing for {now - watch.unhealthy_since:.0f}s"
                )
            return
        watch.unhealthy_since = None
        m = await probe.metrics(session, replica.endpoint, engine)
        if m is None or m.generation_tokens_total is None:
            return
        if m.generation_tokens_total != watch.last_tokens or not m.running:
            watch.last_tokens = m.generation_tokens_total
            watch.last_progress = now
        elif now - watch.last_progress > self.hang_timeout_s:
            self._restart(
                replica.index, watch, "hung", f"{m.running:.0f} running, no token for {now - watch.last_progress:.0f}s"
            )

    def _restart(self, index: int, watch: _Watch, kind: str, detail: str) -> None:
        self._emit(SupervisorEvent(index, kind, detail))
        if watch.restarts >= self.max_restarts:
            watch.busy = True  # leave it out for good; the dispatcher has already taken it out of rotation
            self._emit(SupervisorEvent(index, "gave_up", f"after {watch.restarts} restarts"))
            return
        watch.busy = True
        task = asyncio.create_task(self._do_restart(index, watch))
        self._restarts[task] = index
        task.add_done_callback(lambda t: self._restarts.pop(t, None))

    async def _do_restart(self, index: int, watch: _Watch) -> None:
        await asyncio.sleep(self.backoff_s * (2**watch.restarts))
        watch.restarts += 1
        try:
            replica = await restart_replica(self.state_dir, index, api_key=self.api_key, on_progress=self._progress)
            self._emit(SupervisorEvent(index, "restarted", f"pid {replica.pid}"))
        except FleetgenError as e:
            self._emit(SupervisorEvent(index, "restart_failed", e.message))
        finally:
            watch.busy = False
            watch.unhealthy_since = None
            watch.last_progress = self.clock()

    def _progress(self, p: ReplicaProgress) -> None:
        """Once the job has ended, each phase of a restart is a line: someone is waiting on it."""
        if self._completing and p.phase is not self._phases.get(p.index):
            self._phases[p.index] = p.phase
            self._emit(SupervisorEvent(p.index, "restart_progress", f"{p.phase.value} ({p.elapsed_s:.0f}s)"))
