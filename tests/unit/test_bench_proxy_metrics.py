"""`bench proxy`'s count of the proxy's Produce requests (`sidecar.bench.proxy_metrics`): from the
URL the proxy logs, its /metrics served as the proxy serves it, with `ForwardMetrics` counting."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
import structlog
from prometheus_client import CollectorRegistry, generate_latest

from sidecar.bench.proxy_metrics import (
    metrics_url,
    produce_requests,
    read_produce_requests,
)
from sidecar.bench.workload import free_port
from sidecar.config import MetricsSettings
from sidecar.errors import InputError
from sidecar.health import Health, ObservabilityServer
from sidecar.logs import configure_logging
from sidecar.proxy.metrics import REQUEST, RESPONSE, ForwardMetrics
from sidecar.proxy.versions import PRODUCE

FETCH = 1


@pytest.fixture
def log_stream() -> Iterator[io.StringIO]:
    """JSON log lines, as the proxy child writes them; logging restored afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    stream = io.StringIO()
    configure_logging("json", stream=stream)
    yield stream
    for handler in [h for h in root.handlers if h not in handlers]:
        root.removeHandler(handler)
        handler.close()
    root.setLevel(level)
    structlog.reset_defaults()


def _served(registry: CollectorRegistry, log_stream: io.StringIO) -> Iterator[str]:
    """`registry` served as the proxy serves it; the URL from its `metrics_listening` line."""
    with ObservabilityServer(registry, Health()) as server:
        server.start_if_enabled(MetricsSettings(host="127.0.0.1", port=0))
        [line] = [
            line
            for line in log_stream.getvalue().splitlines()
            if json.loads(line)["event"] == "metrics_listening"
        ]
        yield metrics_url(line)


@pytest.fixture
def forward_metrics() -> tuple[CollectorRegistry, ForwardMetrics]:
    registry = CollectorRegistry()
    return registry, ForwardMetrics(registry)


@pytest.fixture
def endpoint(
    forward_metrics: tuple[CollectorRegistry, ForwardMetrics], log_stream: io.StringIO
) -> Iterator[str]:
    yield from _served(forward_metrics[0], log_stream)


def test_the_produce_requests_are_read_from_the_url_the_proxy_logs(
    forward_metrics: tuple[CollectorRegistry, ForwardMetrics], endpoint: str
) -> None:
    _, metrics = forward_metrics
    assert endpoint.startswith("http://127.0.0.1:") and endpoint.endswith("/metrics")
    # None forwarded yet: the counter has no Produce sample, which counts as 0.
    assert read_produce_requests(endpoint) == 0
    for _ in range(3):
        metrics.frame(PRODUCE, REQUEST, 1200)
    # Neither responses nor other APIs' requests count.
    metrics.frame(PRODUCE, RESPONSE, 80)
    metrics.frame(FETCH, REQUEST, 90)
    assert read_produce_requests(endpoint) == 3
    metrics.frame(PRODUCE, REQUEST, 1200)
    assert read_produce_requests(endpoint) == 4


def test_the_exposition_text_is_parsed_without_a_server(
    forward_metrics: tuple[CollectorRegistry, ForwardMetrics],
) -> None:
    registry, metrics = forward_metrics
    assert produce_requests(generate_latest(registry).decode(), "test") == 0
    for _ in range(7):
        metrics.frame(PRODUCE, REQUEST, 500)
    assert produce_requests(generate_latest(registry).decode(), "test") == 7


def test_an_endpoint_without_the_proxys_counter_is_refused(log_stream: io.StringIO) -> None:
    for url in _served(CollectorRegistry(), log_stream):
        with pytest.raises(InputError, match="exposes no zdict_proxy_frames_total: is it a"):
            read_produce_requests(url)


def test_an_endpoint_that_serves_no_metrics_is_refused(endpoint: str) -> None:
    healthz = endpoint.replace("/metrics", "/healthz")
    with pytest.raises(InputError, match="/healthz does not serve Prometheus metrics"):
        read_produce_requests(healthz)
    with pytest.raises(InputError, match=r"cannot read the proxy's metrics at .*/nowhere: Not"):
        read_produce_requests(endpoint.replace("/metrics", "/nowhere"))


def test_a_proxy_that_is_gone_is_named_with_where_to_look() -> None:
    url = f"http://127.0.0.1:{free_port()}/metrics"
    with pytest.raises(InputError, match=r"cannot read the proxy's metrics at .*see its log"):
        read_produce_requests(url)


@pytest.mark.parametrize(
    "line",
    [
        "Traceback (most recent call last):",
        '{"event": "metrics_listening"}',
        '{"event": "metrics_listening", "url": 9400}',
        '["metrics_listening"]',
    ],
)
def test_a_metrics_listening_line_without_a_url_is_refused(line: str) -> None:
    with pytest.raises(InputError, match="metrics_listening log line names no http:// URL"):
        metrics_url(line)
