"""fleetgen's own Prometheus metrics: what a running `generate` or `run` shows to Prometheus and Grafana."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleetgen._lazy import lazy_exports

# public name -> the module defining it; loaded on first use (see fleetgen._lazy)
_EXPORTS = {
    "ALL": "fleetgen.metrics.catalog",
    "CaptureCollector": "fleetgen.metrics.collectors",
    "GenerateCollector": "fleetgen.metrics.collectors",
    "MetricSpec": "fleetgen.metrics.catalog",
    "MetricsServer": "fleetgen.metrics.server",
    "RunCollector": "fleetgen.metrics.collectors",
    "check_bind": "fleetgen.metrics.server",
    "safe_endpoint": "fleetgen.metrics.collectors",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from fleetgen.metrics.catalog import ALL, MetricSpec
    from fleetgen.metrics.collectors import CaptureCollector, GenerateCollector, RunCollector, safe_endpoint
    from fleetgen.metrics.server import MetricsServer, check_bind

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
