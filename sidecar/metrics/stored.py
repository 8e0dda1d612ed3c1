"""What the broker stores for the records the sidecar wrote, and what the same records would have
stored without it: the one definition of saving, for the relay, the proxy and the in-process
producer alike (`StoredBytes`).

Stored: the record batches as produced (batch header, record framing, keys, headers, values,
after the batch codec), the bytes the broker's log segments hold for them. Without the sidecar:
the same records as the producer's own batches, with its own codec, at the same fill. Saved:
the second minus the first (negative where the sidecar stores more). The proxy counts both
exactly (the client's batches as received, the batches it sends upstream); the relay and the
in-process producer take the first from librdkafka's batch statistics and estimate the second
from a sample of their records (`sidecar.stored_estimate`).

Counted in plain ints (one writer per process: the relay's loop, the proxy's event loop, the
producer's statistics callback) and made metric families at each scrape, as
`sidecar.proxy.metrics.FrameTally` does: no lock per update on the proxy's busiest path.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["PATHS", "PRODUCER", "PROXY", "RELAY", "StoredBytes"]

#: The `path` label: which of the sidecar's ways of writing wrote the records.
RELAY: Final = "relay"
PROXY: Final = "proxy"
PRODUCER: Final = "producer"
PATHS: Final = (RELAY, PROXY, PRODUCER)


class StoredBytes(Collector):
    """`zdict_stored_{bytes,records,batches}_total` and `zdict_stored_without_sidecar_bytes_total`
    by `topic` and `path` (see the module)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        #: [batches, records, stored bytes, bytes without the sidecar] per (topic, path).
        self._counts: dict[tuple[str, str], list[int]] = {}
        registry.register(self)

    def add(
        self, topic: str, path: str, batches: int, records: int, stored: int, without: int
    ) -> None:
        """`batches` record batches holding `records` records were written to `topic` by `path`:
        `stored` bytes as the broker stores them, `without` bytes as the producer's own batches
        would have stored the same records."""
        counts = self._counts.get((topic, path))
        if counts is None:
            counts = self._counts[(topic, path)] = [0, 0, 0, 0]
        counts[0] += batches
        counts[1] += records
        counts[2] += stored
        counts[3] += without

    def describe(self) -> Iterator[Metric]:
        return iter(_families())

    def collect(self) -> Iterator[Metric]:
        families = _families()
        for labels, counts in sorted(list(self._counts.items())):
            for family, count in zip(families, counts, strict=True):
                family.add_metric(labels, count)
        yield from families


def _families() -> tuple[
    CounterMetricFamily, CounterMetricFamily, CounterMetricFamily, CounterMetricFamily
]:
    labels = ("topic", "path")
    return (
        CounterMetricFamily(
            "zdict_stored_batches",
            "Record batches the sidecar wrote for the topic's records (relay: counted under "
            "the input topic), by path (relay, proxy, producer: in-process).",
            labels=labels,
        ),
        CounterMetricFamily(
            "zdict_stored_records",
            "Records in those batches (records per batch: how well batches fill).",
            labels=labels,
        ),
        CounterMetricFamily(
            "zdict_stored_bytes",
            "Bytes of those batches as the broker stores them: batch header, record framing, "
            "keys, headers, values, after the batch codec.",
            labels=labels,
        ),
        CounterMetricFamily(
            "zdict_stored_without_sidecar_bytes",
            "Bytes the same records would have stored without the sidecar: the producer's own "
            "batches and codec at the same fill (proxy: exact; relay and producer: estimated from "
            "a sample).",
            labels=labels,
        ),
    )
