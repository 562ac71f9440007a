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
from fleetgen.fleet.engines import get_engine
from fleetgen.fleet.launcher import restart_replica
from fleetgen.fleet.state import ReplicaState, read_state


@dataclass
class SupervisorEvent:
    index: int
    kind: str  # "dead", "hung", "restarted", "restart_failed", "gave_up", "restart_abandoned"
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

    async def __aexit__(self, *exc) -> None:
        # The job ended first (the survivors finished the rows): say so, or the log shows a death and no restart.
        for index in self.restarting:
            self._emit(SupervisorEvent(index, "restart_abandoned",
                                       "the job ended while it was still restarting; the restart is cancelled"))
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
            return self._restart(replica.index, watch, "dead", f"pid {replica.pid} is gone" + (f" (node {replica.node})" if replica.node else ""))
        code, _ = await probe.health(session, replica.endpoint, engine, timeout=10)
        if code != 200:
            watch.unhealthy_since = watch.unhealthy_since or now
            if now - watch.unhealthy_since > self.hang_timeout_s:
                return self._restart(replica.index, watch, "hung", f"health failing for {now - watch.unhealthy_since:.0f}s")
            return
        watch.unhealthy_since = None
        m = await probe.metrics(session, replica.endpoint, engine)
        if m is None or m.generation_tokens_total is None:
            return
        if m.generation_tokens_total != watch.last_tokens or not m.running:
            watch.last_tokens = m.generation_tokens_total
            watch.last_progress = now
        elif now - watch.last_progress > self.hang_timeout_s:
            self._restart(replica.index, watch, "hung", f"{m.running:.0f} running, no token for {now - watch.last_progress:.0f}s")

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
            replica = await restart_replica(self.state_dir, index, api_key=self.api_key)
            self._emit(SupervisorEvent(index, "restarted", f"pid {replica.pid}"))
        except FleetgenError as e:
            self._emit(SupervisorEvent(index, "restart_failed", e.message))
        finally:
            watch.busy = False
            watch.unhealthy_since = None
            watch.last_progress = self.clock()
