"""What a running generate shows outside itself: its Prometheus page and a progress file in the fleet's state dir."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path

from fleetgen.fleet.jobs import FrozenReplica, JobProgress, remove_job, write_job
from fleetgen.fleet.process import started
from fleetgen.generate.config.sections import ObserveConfig
from fleetgen.generate.observe.stats import Stats

log = logging.getLogger(__name__)

PUBLISH_EVERY_S = 2.0


class JobWatch:
    """Started once the run begins, closed after stats.json is written; costs nothing per request."""

    def __init__(
        self,
        config: ObserveConfig,
        stats: Stats,
        metrics=None,
        *,
        fleet_state: Path | None = None,
        output_dir: Path = Path("."),
        auto: bool = False,
    ) -> None:
        self.config = config
        self.fleet_state = fleet_state  # where the progress file goes (none for --endpoint jobs)
        self.output_dir = str(Path(output_dir).resolve())
        self.auto = auto  # --concurrency auto: status shows the windows as the engines' load sets them
        self.stats = stats
        self._own = None
        self.metrics = metrics
        self._task: asyncio.Task | None = None
        self._pid = os.getpid()
        self._create_time, self._boot_time = started(self._pid)

    @classmethod
    def start(
        cls,
        config: ObserveConfig,
        stats: Stats,
        metrics=None,
        *,
        fleet_state: Path | None = None,
        output_dir: Path = Path("."),
        auto: bool = False,
    ) -> JobWatch:
        """Serve metrics (on `metrics`, a MetricsServer the caller
        owns, or on config.metrics_port) and publish progress."""
        w = cls(config, stats, metrics, fleet_state=fleet_state, output_dir=output_dir, auto=auto)
        if w.metrics is None and config.metrics_port is not None:
            from fleetgen.metrics import MetricsServer  # prometheus_client only when asked for

            w.metrics = w._own = MetricsServer(
                config.metrics_host, config.metrics_port, allow_remote=config.metrics_allow_remote
            ).start()
            log.info(f"metrics: {w.metrics.url}")
        if w.metrics is not None:
            w.metrics.show_generate(stats)
        if fleet_state is not None:
            w._publish()
            w._task = asyncio.create_task(w._publish_every())
        return w

    async def _publish_every(self) -> None:
        while True:
            await asyncio.sleep(PUBLISH_EVERY_S)
            self._publish()

    def _publish(self) -> None:
        s = self.stats
        try:
            write_job(
                Path(self.fleet_state),
                JobProgress(  # type: ignore[arg-type]
                    pid=self._pid,
                    create_time=self._create_time,
                    boot_time=self._boot_time,
                    output_dir=self.output_dir,
                    updated_at=time.time(),
                    total=s.total,
                    done=s.done,
                    ok=s.ok,
                    errors=s.errors,
                    resumed=s.resumed,
                    samples_per_s=s.samples_per_s,
                    output_tokens_per_s=s.output_tokens_per_s,
                    eta_s=s.eta_s,
                    metrics_url=self.metrics.url if self.metrics is not None else None,
                    concurrency="auto" if self.auto else "fixed",
                    limits=_limits(s),
                    stalled=_stalled(s),
                    frozen=frozen_replicas(s),
                ),
            )
        except OSError:
            pass  # a status view must never stop the job

    async def close(self) -> None:
        """Stop publishing and remove the progress file; a port we
        opened closes, a borrowed one keeps the final counters."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            try:
                remove_job(Path(self.fleet_state), self._pid)  # type: ignore[arg-type]
            except OSError:
                pass
        if self._own is not None:
            await asyncio.to_thread(self._own.close)


def _stalled(s: Stats) -> dict[str, int]:
    """Per endpoint, its requests cancelled and re-sent for want of an answer (stall.py), where any were."""
    out: dict[str, int] = {}
    for r in s.replicas:
        if r.stalled:
            out[r.endpoint] = out.get(r.endpoint, 0) + r.stalled
    return out


def frozen_replicas(s: Stats) -> dict[str, FrozenReplica]:
    """Per endpoint declared frozen in this run (freeze.py): now or not, how often, when (Unix times)."""
    to_unix = time.time() - s.clock()
    out: dict[str, FrozenReplica] = {}
    for r in s.replicas:
        if r.freezes:
            last = r.freezes[-1]
            back = last.get("rejoined_at")
            out[r.endpoint] = FrozenReplica(
                now=r.frozen,
                count=r.freeze_count,
                since=last["at"] + to_unix,
                rejoined_at=None if back is None else back + to_unix,
            )
    return out


def _limits(s: Stats) -> dict[str, int]:
    """The window of each replica in use now (a replaced address's stats come first, the replacement's last)."""
    return {r.endpoint: r.window for r in s.replicas}
