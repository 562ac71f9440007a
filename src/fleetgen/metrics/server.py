"""The Prometheus port of a running `generate`, `capture` or `run`: loopback unless told, closed with the job."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server

from fleetgen.errors import ConfigError
from fleetgen.fleet.net import is_loopback
from fleetgen.metrics.collectors import CaptureCollector, GenerateCollector, RunCollector

REMOTE_HINT = (
    "bind 127.0.0.1 (the default), or set metrics_allow_remote (--metrics-allow-remote) to serve it off this host"
)


def check_bind(host: str, allow_remote: bool) -> None:
    """Refuse a non-loopback metrics address unless the user said so: the page shows endpoints and job progress."""
    if not allow_remote and not is_loopback(host):
        raise ConfigError(f"metrics host {host!r} is not a loopback address", hint=REMOTE_HINT)


class MetricsServer:
    """A prometheus_client HTTP server on its own registry; collectors read the job's counters at scrape time."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, allow_remote: bool = False) -> None:
        check_bind(host, allow_remote)
        self.host = host
        self.port = port
        self.registry = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=self.registry)  # the job's own CPU and memory, as process_* metrics
        self._httpd = None
        self._thread = None
        self._generate: GenerateCollector | None = None
        self._capture: CaptureCollector | None = None
        self.run = RunCollector()
        self.registry.register(self.run)

    def start(self) -> MetricsServer:
        try:
            self._httpd, self._thread = start_http_server(self.port, addr=self.host, registry=self.registry)
        except OSError as e:
            raise ConfigError(
                f"cannot serve metrics on {self.host}:{self.port}: {e.strerror or e}",
                hint="choose another --metrics-port (0 picks a free one)",
            ) from None
        self.port = self._httpd.server_port
        return self

    @property
    def bound(self) -> tuple[str, int]:
        """The address the port listens on, as the socket says (not as configured)."""
        return self._httpd.server_address[:2]

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def show_generate(self, stats: Any) -> None:
        """Serve this generate run's counters, in place of an earlier run's."""
        if self._generate is not None:
            self.registry.unregister(self._generate)
        self._generate = GenerateCollector(stats)
        self.registry.register(self._generate)

    def show_capture(self, summary: Any) -> None:
        """Serve this capture run's counters (its summary), in place of an earlier run's; the same one: no change."""
        if self._capture is not None:
            if self._capture.summary is summary:
                return
            self.registry.unregister(self._capture)
        self._capture = CaptureCollector(summary)
        self.registry.register(self._capture)

    def close(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._thread.join(timeout=5)
            self._httpd = None

    def __enter__(self) -> MetricsServer:
        return self.start() if self._httpd is None else self

    def __exit__(self, *exc: object) -> None:
        self.close()
