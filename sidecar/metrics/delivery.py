"""The Kafka side of a relay or proxy: failed deliveries, offset commits, transactions, consumer
lag and the partitions its consumer group assigned it (`DeliveryMetrics`)."""

from __future__ import annotations

import threading
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge

from sidecar.metrics.labels import COMMIT_FAILED, COMMIT_OK, OTHER_REASON, remove_series

__all__ = ["MAX_PRODUCE_ERROR_REASONS", "DeliveryMetrics"]

#: Distinct `reason` values kept for produce errors; later ones are counted as "other", so a
#: broker returning unexpected error names cannot grow the series without bound.
MAX_PRODUCE_ERROR_REASONS: Final = 64


class DeliveryMetrics:
    """The delivery metrics, defined against `registry`. Thread-safe: the relay and the
    delivery callbacks call it concurrently.

    `group` is the consumer group the process's partitions come from (the label of
    `zdict_assigned_partitions`, so that an alert tells one group from another; exported once
    the process joins it: `join_group`).
    """

    def __init__(self, registry: CollectorRegistry, group: str = "") -> None:
        self.produce_errors = Counter(
            "zdict_produce_errors",
            "Records the producer failed to deliver, by error name.",
            ("reason",),
            registry=registry,
        )
        self.commits = Counter(
            "zdict_commits",
            "Consumer offset commits, by result (ok, failed).",
            ("result",),
            registry=registry,
        )
        self.transactions = Counter(
            "zdict_transactions",
            "Transactions of the exactly-once mode, by result (committed, aborted).",
            ("result",),
            registry=registry,
        )
        for result in ("committed", "aborted"):
            self.transactions.labels(result)
        self.consumer_lag = Gauge(
            "zdict_consumer_lag_records",
            "Records between the consumer position and the high watermark, per input partition.",
            ("topic", "partition"),
            registry=registry,
        )
        self.assigned_partitions = Gauge(
            "zdict_assigned_partitions",
            "Input partitions currently assigned to this process, in its consumer group.",
            ("group",),
            registry=registry,
        )
        self._delivery_lock = threading.Lock()
        self._lag: dict[tuple[str, int], Gauge] = {}
        self._produce_errors: dict[str, Counter] = {}
        self._commits = {
            COMMIT_OK: self.commits.labels(COMMIT_OK),
            COMMIT_FAILED: self.commits.labels(COMMIT_FAILED),
        }
        self._group = group
        # No series until the process joins its group: a process that never joins one (the
        # proxy without training) holds no partition by design, and a series at 0 would page
        # ZdictNoPartitionAssigned for it.
        self._assigned: Gauge | None = None

    def set_lag(self, topic: str, partition: int, lag: int) -> None:
        """Records between the consumer position and the high watermark of one partition."""
        key = (topic, partition)
        child = self._lag.get(key)
        if child is None:
            with self._delivery_lock:
                child = self._lag.get(key)
                if child is None:
                    child = self._lag[key] = self.consumer_lag.labels(topic, str(partition))
        child.set(lag)

    def remove_partition(self, topic: str, partition: int) -> None:
        """Forget the lag series of a partition revoked or lost (no-op if it had none)."""
        with self._delivery_lock:
            if self._lag.pop((topic, partition), None) is not None:
                remove_series(self.consumer_lag, topic, str(partition))

    def join_group(self) -> None:
        """The process joins its consumer group: `zdict_assigned_partitions` is exported from
        now on, at 0 until the first assignment (unchanged if one came first)."""
        self._assigned_child()

    def set_assigned_partitions(self, count: int) -> None:
        """How many input partitions this process holds after a rebalance."""
        self._assigned_child().set(count)

    def _assigned_child(self) -> Gauge:
        with self._delivery_lock:
            if self._assigned is None:
                self._assigned = self.assigned_partitions.labels(self._group)
            return self._assigned

    def produce_error(self, reason: str) -> None:
        """One record failed delivery; `reason` is a bounded error name (e.g. KafkaError.name())."""
        child = self._produce_errors.get(reason)
        if child is None:
            with self._delivery_lock:
                child = self._produce_errors.get(reason)
                if child is None:
                    if len(self._produce_errors) >= MAX_PRODUCE_ERROR_REASONS:
                        reason = OTHER_REASON
                    child = self._produce_errors.get(reason)
                    if child is None:
                        child = self._produce_errors[reason] = self.produce_errors.labels(reason)
        child.inc()

    def commit(self, ok: bool) -> None:
        """One offset commit finished, successfully or not."""
        self._commits[COMMIT_OK if ok else COMMIT_FAILED].inc()

    def transaction(self, committed: bool) -> None:
        """One transaction of the exactly-once mode ended: committed or aborted."""
        self.transactions.labels("committed" if committed else "aborted").inc()
