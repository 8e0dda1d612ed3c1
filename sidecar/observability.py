"""A long-running process's observability: its metrics (against a Prometheus registry of its
own), its health, and the endpoint that serves both (/metrics, /healthz, /readyz) while the
process runs (`zdict-sidecar run` and `proxy`)."""

from __future__ import annotations

from types import TracebackType

from prometheus_client import CollectorRegistry

from sidecar.config import MetricsSettings
from sidecar.health import Health, ObservabilityServer
from sidecar.metrics import Metrics


class Observability:
    """Metrics and health, served from `__enter__` (if the settings enable the endpoint) until
    `__exit__`."""

    def __init__(self, settings: MetricsSettings, group: str) -> None:
        """`group`: the consumer group the process's metrics are labelled with."""
        self.prometheus = CollectorRegistry()
        self.metrics = Metrics(self.prometheus, group=group)
        self.health = Health()
        self._settings = settings
        self._server = ObservabilityServer(self.prometheus, self.health)

    def __enter__(self) -> Observability:
        self._server.start_if_enabled(self._settings)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._server.stop()
