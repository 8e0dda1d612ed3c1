"""Errors that fail fast (issue 40): one line naming the cause and the setting, no traceback,
before anything waits on a broker."""

from __future__ import annotations

import socket

import pytest
from prometheus_client import CollectorRegistry

from sidecar.config import MetricsSettings
from sidecar.errors import ConfigError
from sidecar.health import Health, ObservabilityServer


def test_a_metrics_port_in_use_is_a_configuration_error_naming_the_port_and_the_setting() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        server = ObservabilityServer(CollectorRegistry(), Health())
        settings = MetricsSettings(host="127.0.0.1", port=port)
        with pytest.raises(ConfigError) as info:
            server.start_if_enabled(settings)
    message = str(info.value)
    assert f"the metrics port {port} is in use" in message
    assert "ZDICT_METRICS__PORT" in message and "\n" not in message
    assert server.port is None  # nothing half-started is left to stop


def test_a_metrics_host_not_of_this_machine_names_the_host_setting() -> None:
    server = ObservabilityServer(CollectorRegistry(), Health())
    with pytest.raises(
        ConfigError, match=r"cannot listen on 192\.0\.2\.1:0: .*ZDICT_METRICS__HOST"
    ):
        server.start_if_enabled(MetricsSettings(host="192.0.2.1", port=0))
