"""What the relay does with records: outcomes, bytes in and out, the codec's time per batch,
delivery latency, dead letters, the record batches it stores and what they save
(`stored.StoredBytes`, the proxy's too), and the output modes (`RecordMetrics`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from sidecar.metrics.stored import StoredBytes

__all__ = ["CODEC_BATCH_BUCKETS", "RELAY_LATENCY_BUCKETS", "RecordMetrics"]

#: Seconds the codec takes over one consumed batch: tens of microseconds for a few small
#: records, around a millisecond for a 500-record batch at ~2 µs a record, seconds for a large
#: batch of large values at high levels.
CODEC_BATCH_BUCKETS: Final = (
    10e-6,
    25e-6,
    50e-6,
    100e-6,
    250e-6,
    500e-6,
    1e-3,
    2.5e-3,
    5e-3,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
)
#: Record timestamp → delivery acknowledged: milliseconds when keeping up, minutes when lagging.
RELAY_LATENCY_BUCKETS: Final = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
)


class RecordMetrics:
    """The record metrics, defined against `registry`; per-topic children come from
    `NamespaceMetrics`, the output's batches and modes from the methods here."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.records = Counter(
            "zdict_records",
            "Records handled, by op (encode, decode) and what the codec did with the value; raw: "
            "written as it came by the output mode.",
            ("topic", "op", "outcome"),
            registry=registry,
        )
        self.input_bytes = Counter(
            "zdict_input_bytes",
            "Record value bytes consumed (raw when encoding; tombstones count 0).",
            ("topic", "op"),
            registry=registry,
        )
        self.output_bytes = Counter(
            "zdict_output_bytes",
            "Record value bytes produced, plus the bytes of the header we add to compressed ones.",
            ("topic", "op"),
            registry=registry,
        )
        self.codec_batch_duration = Histogram(
            "zdict_codec_batch_duration_seconds",
            "Wall time of the codec over one consumed batch; seconds per record: rate(_sum) / "
            "rate(zdict_codec_records_total).",
            ("topic", "op"),
            buckets=CODEC_BATCH_BUCKETS,
            registry=registry,
        )
        self.codec_records = Counter(
            "zdict_codec_records",
            "Records in the batches zdict_codec_batch_duration_seconds observed (not those "
            "written raw).",
            ("topic", "op"),
            registry=registry,
        )
        self.relay_latency_seconds = Histogram(
            "zdict_relay_latency_seconds",
            "Input record timestamp to output record acknowledged by the broker.",
            ("topic",),
            buckets=RELAY_LATENCY_BUCKETS,
            registry=registry,
        )
        self.dead_letters = Counter(
            "zdict_dead_letters",
            "Records set aside to the dead-letter topic, by the stage that could not process them.",
            ("topic", "stage"),
            registry=registry,
        )
        #: The one definition of saving (`stored.StoredBytes`): what the broker stores for the
        #: records written, and what they would have stored without the sidecar.
        self.stored = StoredBytes(registry)
        self.output_mode = Gauge(
            "zdict_output_mode",
            "1 for the mode an output partition is written in (frames or raw), 0 for the other; "
            "partition -1: the whole topic (keyed output).",
            ("topic", "partition", "mode"),
            registry=registry,
        )

    def set_output_mode(self, topic: str, partition: int, mode: str, modes: Sequence[str]) -> None:
        """Output `topic`'s `partition` is written in `mode` (one of `modes`)."""
        for each in modes:
            self.output_mode.labels(topic, str(partition), each).set(1 if each == mode else 0)
