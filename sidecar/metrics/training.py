"""Training of each topic's dictionaries: runs and their triggers, the trainer role, the live
compression factor over the drift window, the reservoir (`TrainingMetrics`). Per-topic children
come from `NamespaceMetrics`."""

from __future__ import annotations

from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["TRAINING_BUCKETS", "TrainingMetrics"]

#: One training run: seconds for a small sample, up to an hour for a large grid.
TRAINING_BUCKETS: Final = (1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)


class TrainingMetrics:
    """The training metrics, defined against `registry`."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.training_runs = Counter(
            "zdict_training_runs",
            "Training runs, by result (promoted, rejected, failed).",
            ("topic", "result"),
            registry=registry,
        )
        self.training_duration = Histogram(
            "zdict_training_duration_seconds",
            "Wall time of one training run, sampling excluded.",
            ("topic",),
            buckets=TRAINING_BUCKETS,
            registry=registry,
        )
        self.training_cpu_seconds = Counter(
            "zdict_training_cpu_seconds",
            "CPU time of the training process (it runs beside the relay, at a lower priority).",
            ("topic",),
            registry=registry,
        )
        self.training_triggers = Counter(
            "zdict_training_triggers",
            "Training runs started, by trigger (first, scheduled, drift).",
            ("topic", "trigger"),
            registry=registry,
        )
        self.last_training = Gauge(
            "zdict_last_training_timestamp_seconds",
            "When the topic's latest training run recorded in the registry ended (Unix time), by "
            "trigger (manual: `zdict-sidecar train`) and result.",
            ("topic", "trigger", "result"),
            registry=registry,
        )
        self.trainer = Gauge(
            "zdict_trainer",
            "1 where this process trains the topic (it holds partition 0 of it).",
            ("topic",),
            registry=registry,
        )
        self.pinned = Gauge(
            "zdict_namespace_pinned",
            "1 while an operator pins the topic's dictionary (`dicts pin`): no training replaces "
            "it.",
            ("topic",),
            registry=registry,
        )
        self.training_skipped = Counter(
            "zdict_training_skipped",
            "Training runs that were due and not started, by reason (pinned: an operator pinned "
            "the topic's dictionary).",
            ("topic", "reason"),
            registry=registry,
        )
        self.live_compression_factor = Gauge(
            "zdict_live_compression_factor",
            "Raw / output bytes over the drift window (a factor: 2 halves the bytes), values no "
            "dictionary could shrink left out.",
            ("topic",),
            registry=registry,
        )
        self.sample_bytes = Gauge(
            "zdict_sample_bytes",
            "Bytes the topic's training reservoir holds, values plus bookkeeping.",
            ("topic",),
            registry=registry,
        )
        self.sample_records = Gauge(
            "zdict_sample_records",
            "Records (their values) the topic's training reservoir holds.",
            ("topic",),
            registry=registry,
        )
