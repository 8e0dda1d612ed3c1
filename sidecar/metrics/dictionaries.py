"""The active dictionary of each topic, and the process's reads and writes of the registry
topic (`DictionaryMetrics`)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Info

from sidecar.dictionaries.registry_state import IGNORED_REASONS
from sidecar.metrics.labels import COMMIT_FAILED, COMMIT_OK, remove_series

if TYPE_CHECKING:
    from sidecar.dictionaries.model import Dictionary

__all__ = ["DictionaryMetrics"]


class DictionaryMetrics:
    """The dictionary metrics, defined against `registry`. Thread-safe."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.dictionary_info = Info(
            "zdict_dictionary",
            "The active dictionary of each topic (dict_id 0: compressing without one).",
            ("topic",),
            registry=registry,
        )
        self.heldout_compression_factor = Gauge(
            "zdict_dictionary_heldout_compression_factor",
            "Raw / (frame + header) bytes of the active dictionary on its held-out data (a "
            "factor: 2 halves the bytes).",
            ("topic",),
            registry=registry,
        )
        self.dictionary_created = Gauge(
            "zdict_dictionary_created_timestamp_seconds",
            "When the active dictionary was trained (Unix time).",
            ("topic",),
            registry=registry,
        )
        self.batch_level = Gauge(
            "zdict_batch_compression_level",
            "The zstd level of the producer batches carrying the topic's records: chosen at "
            "training, or configured.",
            ("topic",),
            registry=registry,
        )
        self.registry_publications = Counter(
            "zdict_registry_publications",
            "Dictionaries and activations published to the registry topic, by result.",
            ("result",),
            registry=registry,
        )
        for result in (COMMIT_OK, COMMIT_FAILED):
            self.registry_publications.labels(result)
        self.registry_records_ignored = Counter(
            "zdict_registry_records_ignored",
            "Registry records no reader uses (malformed, out of range, ...), by class of reason.",
            ("reason",),
            registry=registry,
        )
        for reason in IGNORED_REASONS:
            self.registry_records_ignored.labels(reason)
        self._dictionary_lock = threading.Lock()

    def registry_published(self, ok: bool) -> None:
        """One publication to the registry topic (dictionary or activation) ended."""
        self.registry_publications.labels(COMMIT_OK if ok else COMMIT_FAILED).inc()

    def registry_record_ignored(self, reason: str) -> None:
        """One registry record was ignored; `reason` is one of `IGNORED_REASONS`."""
        self.registry_records_ignored.labels(reason).inc()

    def set_batch_level(self, topic: str, level: int | None) -> None:
        """The zstd level `topic`'s batches are compressed at (None: not zstd, no series)."""
        if level is None:
            remove_series(self.batch_level, topic)
        else:
            self.batch_level.labels(topic).set(level)

    def set_active_dictionary(
        self,
        namespace: str,
        dict_id: int,
        version: int,
        heldout_ratio: float | None,
        created_at: datetime | None,
    ) -> None:
        """Make `dict_id` (0 = none) the one `zdict_dictionary_info` series of `namespace`.

        The previous dictionary's series is replaced, not left at 0: exactly one series per
        topic is 1. `heldout_ratio` (raw / framed bytes, the compression factor) and
        `created_at` None remove those gauges (e.g. no dictionary). A naive `created_at` is
        taken as UTC.
        """
        with self._dictionary_lock:
            self.dictionary_info.labels(namespace).info(
                {"dict_id": str(dict_id), "version": str(version)}
            )
            if heldout_ratio is None:
                remove_series(self.heldout_compression_factor, namespace)
            else:
                self.heldout_compression_factor.labels(namespace).set(heldout_ratio)
            if created_at is None:
                remove_series(self.dictionary_created, namespace)
            else:
                if created_at.tzinfo is None:
                    created_at = created_at.replace(tzinfo=UTC)
                self.dictionary_created.labels(namespace).set(created_at.timestamp())

    def set_dictionary(self, namespace: str, dictionary: Dictionary | None) -> None:
        """`set_active_dictionary` from a store `Dictionary`; None: compressing without one."""
        if dictionary is None:
            self.set_active_dictionary(namespace, 0, 0, None, None)
            return
        meta = dictionary.meta
        self.set_active_dictionary(
            namespace, meta.id, meta.version, meta.heldout_ratio, meta.created_at
        )
