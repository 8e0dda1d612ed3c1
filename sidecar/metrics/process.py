"""`Metrics`: every metric of a relay or proxy process, by concern, against one registry.

`Metrics` is the records' (`RecordMetrics`), the Kafka side's (`DeliveryMetrics`), the
dictionaries' (`DictionaryMetrics`) and training's (`TrainingMetrics`) metrics defined against
the `CollectorRegistry` the caller passes in (the process makes one; each test makes a fresh
one), with the build's versions, the process collector and the container's memory, and the
per-topic children (`namespace`).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import datetime

from prometheus_client import CollectorRegistry

from sidecar.cgroup_memory import CgroupMemory
from sidecar.codec import Outcome, Transformed
from sidecar.metrics.build import register_build_and_process
from sidecar.metrics.delivery import DeliveryMetrics
from sidecar.metrics.dictionaries import DictionaryMetrics
from sidecar.metrics.namespace import NamespaceMetrics
from sidecar.metrics.records import RecordMetrics
from sidecar.metrics.training import TrainingMetrics

__all__ = ["Metrics"]


class Metrics(RecordMetrics, DeliveryMetrics, DictionaryMetrics, TrainingMetrics):
    """All metrics of the process, registered in `registry`.

    Thread-safe: the relay, delivery callbacks and the training thread may call it concurrently.
    The metric objects are public attributes for tests and for anything not covered by a method.
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        memory: CgroupMemory | None = None,
        *,
        group: str = "",
    ) -> None:
        """`memory` reads the container's memory figures (default: this process's cgroup);
        `group` is the consumer group the process's partitions come from (`DeliveryMetrics`)."""
        self.registry = registry
        RecordMetrics.__init__(self, registry)
        DeliveryMetrics.__init__(self, registry, group)
        DictionaryMetrics.__init__(self, registry)
        TrainingMetrics.__init__(self, registry)
        self.build = register_build_and_process(registry, memory or CgroupMemory())
        self._lock = threading.Lock()
        self._namespaces: dict[str, NamespaceMetrics] = {}

    def namespace(
        self, namespace: str, outcomes: Sequence[str] = Outcome.COUNTED
    ) -> NamespaceMetrics:
        """The cached children of topic `namespace`, registering it on first use with
        `outcomes` (the encoder's, or `Outcome.DECODE_ALL` for a decode relay: `op` decode)
        at 0."""
        children = self._namespaces.get(namespace)
        if children is None:
            with self._lock:
                children = self._namespaces.get(namespace)
                if children is None:
                    children = NamespaceMetrics(self, self, namespace, outcomes)
                    self._namespaces[namespace] = children
        return children

    def observe_batch(
        self, namespace: str, encoded: Sequence[Transformed], encode_seconds: float
    ) -> None:
        """`NamespaceMetrics.observe_batch` for `namespace` (one dict lookup more)."""
        self.namespace(namespace).observe_batch(encoded, encode_seconds)

    def observe_delivery_latency(self, namespace: str, seconds: float) -> None:
        """`NamespaceMetrics.observe_delivery_latency` for `namespace`."""
        self.namespace(namespace).observe_delivery_latency(seconds)

    def training_run(self, namespace: str, result: str, seconds: float) -> None:
        """`NamespaceMetrics.training_run` for `namespace`; `result` must be a `Decision`."""
        self.namespace(namespace).training_run(result, seconds)

    def set_active_dictionary(
        self,
        namespace: str,
        dict_id: int,
        version: int,
        heldout_ratio: float | None,
        created_at: datetime | None,
    ) -> None:
        """`DictionaryMetrics.set_active_dictionary`, the topic's other series registered."""
        self.namespace(namespace)
        super().set_active_dictionary(namespace, dict_id, version, heldout_ratio, created_at)
