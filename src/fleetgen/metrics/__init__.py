"""fleetgen's own Prometheus metrics: what a running `generate` or `run` shows to Prometheus and Grafana."""

from fleetgen.metrics.catalog import ALL, MetricSpec
from fleetgen.metrics.collectors import GenerateCollector, RunCollector, safe_endpoint
from fleetgen.metrics.server import MetricsServer, check_bind

__all__ = [
    "ALL",
    "GenerateCollector",
    "MetricSpec",
    "MetricsServer",
    "RunCollector",
    "check_bind",
    "safe_endpoint",
]
