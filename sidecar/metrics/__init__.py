"""The Prometheus metrics of a relay or proxy process (`Metrics`, `NamespaceMetrics`).

All of them are defined once, by concern, against a `CollectorRegistry` the caller passes in:
`records` (outcomes, bytes, the codec's time per batch, latency, dead letters, the output
modes), `stored` (what the broker stores for the records written and what they would have
stored without the sidecar: the relay's, the proxy's and the in-process producer's saving),
`delivery` (failed deliveries, commits, transactions, lag, assigned partitions),
`dictionaries` (the active dictionary, the registry topic), `training` (runs, triggers, the
trainer role, the live compression factor, the reservoir), `build` (versions, process,
memory); `process` puts them together as `Metrics`, `namespace` holds one topic's children,
`labels` the bounded label values.

Conventions (Prometheus's naming practices): base units in the name (`_seconds`, `_bytes`),
`_total` counters, `_ratio` only for a 0-1 fraction (a raw / compressed figure above 1 is a
`_compression_factor`), `_duration_seconds` for a timed operation, `records` (never messages)
for Kafka records, `op` for what the codec did (encode, decode), and only bounded labels
(topic, op, mode, outcome, result, partition, reason, stage, trigger, group), never anything
per record.

Each metric, its type, labels and meaning: sidecar/REFERENCE.md, generated from these definitions
(`make reference`). The container's memory is collected by `sidecar.cgroup_memory`; an
application's in-process producer has metrics of its own, `sidecar.serde.metrics`; the proxy too,
`sidecar.proxy.metrics`.
"""

from __future__ import annotations

from sidecar.metrics.build import build_info
from sidecar.metrics.delivery import MAX_PRODUCE_ERROR_REASONS
from sidecar.metrics.labels import (
    COMMIT_FAILED,
    COMMIT_OK,
    DEAD_LETTER_STAGES,
    DECODE,
    ENCODE,
    LAST_TRAINING_RESULTS,
    MANUAL_TRIGGER,
    OTHER_REASON,
    TRAINING_RESULTS,
    TRAINING_TRIGGERS,
)
from sidecar.metrics.namespace import NamespaceMetrics
from sidecar.metrics.process import Metrics
from sidecar.metrics.records import CODEC_BATCH_BUCKETS, RELAY_LATENCY_BUCKETS
from sidecar.metrics.training import TRAINING_BUCKETS

__all__ = [
    "CODEC_BATCH_BUCKETS",
    "COMMIT_FAILED",
    "COMMIT_OK",
    "DEAD_LETTER_STAGES",
    "DECODE",
    "ENCODE",
    "LAST_TRAINING_RESULTS",
    "MANUAL_TRIGGER",
    "MAX_PRODUCE_ERROR_REASONS",
    "OTHER_REASON",
    "RELAY_LATENCY_BUCKETS",
    "TRAINING_BUCKETS",
    "TRAINING_RESULTS",
    "TRAINING_TRIGGERS",
    "Metrics",
    "NamespaceMetrics",
    "build_info",
]
