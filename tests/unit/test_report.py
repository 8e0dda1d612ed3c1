"""`zdict-sidecar report` without Prometheus: durations, units, the /metrics snapshot of a real
in-process endpoint, the PNG, and its failures (missing matplotlib, nothing listening)."""

from __future__ import annotations

import math
import os
import socket
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from sidecar.codec import Encoder, Outcome
from sidecar.errors import ConfigError, InputError
from sidecar.health import Health, ObservabilityServer
from sidecar.metrics import Metrics
from sidecar.metrics.stored import PROXY, RELAY
from sidecar.tools.report import (
    MONTH_SECONDS,
    Summary,
    TopicSaving,
    format_summary,
    from_metrics,
    human_bytes,
    parse_duration,
    parse_time,
    write_png,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("30m", 1800), ("6h", 21600), ("7d", 604800), ("1w", 604800), ("1.5h", 5400)],
)
def test_parse_duration_reads_prometheus_style_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "1", "h", "0s", "-5m", "1y", "1h30m"])
def test_parse_duration_refuses_anything_else_naming_the_option(text: str) -> None:
    with pytest.raises(ConfigError, match="--range"):
        parse_duration(text)


@pytest.mark.parametrize(
    "text",
    [
        "1796310000",
        "1796310000.0",
        "2026-12-03T15:00:00Z",
        "2026-12-03T15:00:00",
        "2026-12-03T16:00:00+01:00",
    ],
)
def test_parse_time_reads_unix_seconds_and_iso_8601_utc_by_default(text: str) -> None:
    assert parse_time(text) == 1_796_310_000


@pytest.mark.parametrize("text", ["", "yesterday", "2026-13-03T15:00:00Z", "15:00"])
def test_parse_time_refuses_anything_else_naming_the_option(text: str) -> None:
    with pytest.raises(ConfigError, match="--end"):
        parse_time(text)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0, "0 B"),
        (1023, "1,023 B"),
        (1536, "1.50 KiB"),
        (3 * 2**30, "3.00 GiB"),
        (-2048, "-2.00 KiB"),
    ],
)
def test_human_bytes_uses_iec_units(value: float, text: str) -> None:
    assert human_bytes(value) == text


def test_summary_derives_the_saving_against_the_producers_codec_and_the_monthly_estimate() -> None:
    summary = Summary("metrics", "u", None, 0.0, 100.0, 1000.0, 1800.0, 8.0, 3600.0, 1200.0)
    assert summary.saved_bytes == 800.0
    assert summary.saved_share == 800.0 / 1800.0
    assert summary.ratio == 3.0  # the value ratio, beside
    assert summary.saved_per_month == 8.0 * MONTH_SECONDS == 8.0 * 30 * 86400
    empty = Summary("metrics", "u", None, 0, 1, 0.0, 0.0, 0.0)
    assert math.isnan(empty.ratio) and math.isnan(empty.saved_share)


def test_a_topic_written_raw_says_so_instead_of_a_ratio_and_a_partly_raw_one_its_share() -> None:
    raw = TopicSaving("logs", 700.0, 700.0, 1.0).describe()
    assert raw.startswith("raw mode:") and "steps aside" in raw
    partly = TopicSaving("orders", 600.0, 1000.0, 0.25).describe()
    assert partly.startswith("saved 40.0% against the producer's codec")
    assert partly.endswith("25% of its records written raw")


@pytest.fixture
def endpoint() -> Iterator[tuple[str, Metrics]]:
    """A real /metrics endpoint (the sidecar's server) with two namespaces encoded."""
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    encoder = Encoder(None)
    for namespace, values in (("orders", [b"a" * 300] * 40), ("clicks", [b"x" * 20, None] * 5)):
        encoded = encoder.encode_batch([(v, []) for v in values])
        metrics.observe_batch(namespace, encoded, 0.001)
    metrics.namespace("logs").observe_counts({Outcome.RAW: 10}, 500, 500, 0.0)
    metrics.stored.add("orders", RELAY, 4, 40, 5000, 9000)
    metrics.stored.add("clicks", RELAY, 1, 10, 400, 380)
    metrics.stored.add("logs", PROXY, 1, 10, 700, 700)
    with ObservabilityServer(registry, Health()) as server:
        _, port = server.start("127.0.0.1", 0)
        yield f"http://127.0.0.1:{port}/metrics", metrics


def test_a_metrics_snapshot_sums_the_counters_of_the_selected_namespaces(
    endpoint: tuple[str, Metrics],
) -> None:
    url, metrics = endpoint
    everything = from_metrics(url)
    orders = from_metrics(url, "ord.*")
    registry = metrics.registry

    def counter(name: str, namespace: str) -> float:
        value = registry.get_sample_value(name, {"topic": namespace, "op": "encode"})
        assert value is not None
        return value

    assert (orders.summary.stored_bytes, orders.summary.without_bytes) == (5000, 9000)
    assert orders.summary.saved_bytes == 4000 and orders.summary.saved_per_second > 0
    assert orders.summary.input_bytes == counter("zdict_input_bytes_total", "orders") == 12_000
    assert orders.summary.ratio > 5  # 300 repeated bytes: the value ratio, beside
    assert everything.summary.saved_bytes == 4000 - 20
    assert everything.bytes_by_namespace == {
        "orders": (9000, 5000),
        "clicks": (380, 400),
        "logs": (700, 700),
    }
    assert everything.outcomes["clicks"]["tombstone"] == 5
    text = format_summary(everything.summary)
    assert "  logs: raw mode:" in text
    assert "  clicks: saved -5.3% against the producer's codec" in text


def test_a_metrics_snapshot_draws_a_png_of_the_requested_size(
    endpoint: tuple[str, Metrics], tmp_path: Path
) -> None:
    url, _ = endpoint
    out = tmp_path / "deep" / "report.png"
    write_png(from_metrics(url), out)
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", data[16:24]) == (1400, 1000)


def test_an_endpoint_that_is_not_a_sidecar_is_refused(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    with ObservabilityServer(registry, Health()) as server:
        _, port = server.start("127.0.0.1", 0)
        with pytest.raises(InputError, match="no zdict_stored_bytes_total"):
            from_metrics(f"http://127.0.0.1:{port}/metrics")


def _report(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sidecar", "report", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )


def test_an_unreachable_prometheus_exits_1_with_one_line_naming_it(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port nobody listens on once released
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    result = _report("--prometheus", url, "--out", str(tmp_path / "x.png"))
    assert result.returncode == 1
    assert result.stderr.startswith(f"zdict-sidecar: error: cannot reach {url}: ")
    assert len(result.stderr.splitlines()) == 1
    assert not (tmp_path / "x.png").exists()


def test_without_matplotlib_the_report_names_the_extra_to_install(tmp_path: Path) -> None:
    # A `matplotlib` package that cannot be imported stands for an installation without it.
    shadow = tmp_path / "shadow" / "matplotlib"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('not installed')\n")
    env = dict(os.environ, PYTHONPATH=str(shadow.parent))
    result = _report("--metrics", "http://127.0.0.1:9/metrics", "--out", "x.png", env=env)
    assert result.returncode == 2
    assert "pip install 'zdict-sidecar[report]'" in result.stderr
