"""The serde producer's metrics: an application compressing in-process (`sidecar.serde`), on
the application's own `CollectorRegistry`; `topic` is the topic produced to.

The metrics (`zdict_producer_*`) are listed in sidecar/serde/README.md.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Final

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector

from sidecar.codec import Outcome
from sidecar.codec.output_mode import MODES
from sidecar.metrics.dictionaries import batch_level_gauge
from sidecar.metrics.labels import remove_series
from sidecar.metrics.stored import StoredBytes

if TYPE_CHECKING:
    from sidecar.dictionaries.model import Dictionary

__all__ = ["READ_FAILED", "READ_OK", "ProducerMetrics", "ProducerTopicMetrics"]

#: Values of the `result` label of `zdict_producer_registry_reads_total`.
READ_OK: Final = "ok"
READ_FAILED: Final = "failed"


class ProducerTopicMetrics:
    """The tallies of one topic in one producing thread, added up by `ProducerMetrics` at each
    scrape.

    One update per record, so no lock and no prometheus_client child (each `inc` takes a lock of
    its own): only the thread that owns a tally writes it (`ProducerMetrics.tally`), and a scrape
    reads it as it is, at most one record behind.
    """

    __slots__ = ("at", "dictionary", "encode_seconds", "input_bytes", "outcomes", "output_bytes")

    def __init__(self) -> None:
        self.outcomes: dict[str, int] = dict.fromkeys(Outcome.COUNTED, 0)
        self.input_bytes = 0
        self.output_bytes = 0
        self.encode_seconds = 0.0
        #: The dictionary of this thread's last record (None: none), and when it ended
        #: (`time.perf_counter`; 0.0: no record yet).
        self.dictionary: Dictionary | None = None
        self.at = 0.0


#: A producing thread and its tally of one topic.
_ThreadTally = tuple[threading.Thread, ProducerTopicMetrics]


class ProducerMetrics(Collector):
    """Metrics of an application compressing in-process (`sidecar.serde`), registered on the
    `CollectorRegistry` the application passes in (its own, or prometheus_client's `REGISTRY`).

    A custom collector: each producing thread tallies its records in `ProducerTopicMetrics` of its
    own (cheap, exact), and the metric families are built from the tallies when the registry is
    scraped. Every outcome of a topic exists from its first record on, so rate() has a zero to
    start from. Names start with `zdict_producer_`, apart from the relay's, so one process may
    export both.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        """Register on `registry`; a second `ProducerMetrics` on one registry is refused
        (`ValueError`, duplicated timeseries) by prometheus_client."""
        self._lock = threading.Lock()
        #: Per topic: the live threads' tallies, and what the ended threads' added up to.
        self._topics: dict[str, tuple[list[_ThreadTally], ProducerTopicMetrics]] = {}
        self._reads = {READ_OK: 0, READ_FAILED: 0}
        #: The output mode of every (topic, partition) written (`serde.output_modes`).
        self._modes: dict[tuple[str, int], str] = {}
        registry.register(self)
        #: What the records store, and would have stored without zdict (`serde.stored`).
        self.stored = StoredBytes(registry)
        #: The zstd level of the producer's batches, per topic it wrote (`set_batch_level`).
        self.batch_level = batch_level_gauge(registry)
        self._level: int | None = None

    def tally(self, topic: str) -> ProducerTopicMetrics:
        """A new tally of `topic` for the calling thread, which alone may write it (keep it: the
        per-record path). Once a thread has ended, its counts are folded into the topic's
        totals (at the next scrape or new tally), so threads that come and go leave no tally
        behind."""
        tally = ProducerTopicMetrics()
        with self._lock:
            if topic not in self._topics and self._level is not None:
                self.batch_level.labels(topic).set(self._level)
            live, ended = self._topics.setdefault(topic, ([], ProducerTopicMetrics()))
            _fold_ended(live, ended)
            live.append((threading.current_thread(), tally))
        return tally

    def set_batch_level(self, level: int | None) -> None:
        """The zstd level the producer compresses its batches at (None: not zstd, no series),
        shown for every topic it writes (`zdict_batch_compression_level`)."""
        with self._lock:
            self._level = level
            for topic in self._topics:
                if level is None:
                    remove_series(self.batch_level, topic)
                else:
                    self.batch_level.labels(topic).set(level)

    def registry_read(self, ok: bool) -> None:
        """One read of the registry topic ended (`FollowingEncoder`'s `on_read`)."""
        with self._lock:
            self._reads[READ_OK if ok else READ_FAILED] += 1

    def set_output_modes(self, modes: dict[tuple[str, int], str]) -> None:
        """The output mode of every (topic, partition) the producer writes (-1: the partitioner
        chooses), replacing the last."""
        with self._lock:
            self._modes = dict(modes)

    def _families(
        self,
    ) -> tuple[
        CounterMetricFamily,
        CounterMetricFamily,
        CounterMetricFamily,
        SummaryMetricFamily,
        InfoMetricFamily,
        CounterMetricFamily,
        GaugeMetricFamily,
    ]:
        return (
            CounterMetricFamily(
                "zdict_producer_records",
                "Records the application produced through zdict, by what the codec did (raw: "
                "written as they came by the output mode, not encoded).",
                labels=("topic", "outcome"),
            ),
            CounterMetricFamily(
                "zdict_producer_input_bytes",
                "Record value bytes before compression (tombstones count 0).",
                labels=("topic",),
            ),
            CounterMetricFamily(
                "zdict_producer_output_bytes",
                "Record value bytes after compression, plus the bytes of the header we add.",
                labels=("topic",),
            ),
            SummaryMetricFamily(
                "zdict_producer_encode_duration_seconds",
                "Time spent compressing record values in produce() (or the serializer).",
                labels=("topic",),
            ),
            InfoMetricFamily(
                "zdict_producer_dictionary",
                "The dictionary the topic's last record was compressed with (dict_id 0: none "
                "known yet, compressing without one).",
                labels=("topic",),
            ),
            CounterMetricFamily(
                "zdict_producer_registry_reads",
                "Reads of the registry topic by the producer's dictionary follower, by result.",
                labels=("result",),
            ),
            GaugeMetricFamily(
                "zdict_producer_output_mode",
                "1 for the mode a partition is written in, 0 for the other: frames (per-record "
                "frames with the zd header) or raw (values as they came, batch compression only); "
                "partition -1: records left to the partitioner.",
                labels=("topic", "partition", "mode"),
            ),
        )

    def describe(self) -> Iterator[Metric]:
        # The names, for the registry's duplicate check, without taking a snapshot.
        return iter(self._families())

    def collect(self) -> Iterator[Metric]:
        records, inputs, outputs, seconds, info, reads, modes = self._families()
        with self._lock:
            totals = [(name, self._sum(name)) for name in sorted(self._topics)]
            read_counts = dict(self._reads)
            written = sorted(self._modes.items())
        for name, total in totals:
            for outcome, n in total.outcomes.items():
                records.add_metric((name, outcome), n)
            inputs.add_metric((name,), total.input_bytes)
            outputs.add_metric((name,), total.output_bytes)
            # Records written raw were not encoded: the mean encode time is over the others.
            count = sum(total.outcomes.values()) - total.outcomes.get(Outcome.RAW, 0)
            seconds.add_metric((name,), count_value=count, sum_value=total.encode_seconds)
            if total.at:
                dictionary = total.dictionary
                info.add_metric(
                    (name,),
                    {
                        "dict_id": str(dictionary.id if dictionary else 0),
                        "version": str(dictionary.meta.version if dictionary else 0),
                    },
                )
        for result, n in read_counts.items():
            reads.add_metric((result,), n)
        for (topic, partition), mode in written:
            for each in MODES:
                modes.add_metric((topic, str(partition), each), 1 if each == mode else 0)
        yield from (records, inputs, outputs, seconds, info, reads, modes)

    def _sum(self, topic: str) -> ProducerTopicMetrics:
        """`topic`'s counts over every thread (under `_lock`), the dictionary the last record's."""
        live, ended = self._topics[topic]
        _fold_ended(live, ended)
        total = ProducerTopicMetrics()
        _add(total, ended)
        for _, tally in live:
            _add(total, tally)
        return total


def _fold_ended(live: list[_ThreadTally], ended: ProducerTopicMetrics) -> None:
    """Move the tallies of threads that have ended (they write no more) into `ended`."""
    alive = []
    for thread, tally in live:
        if thread.is_alive():
            alive.append((thread, tally))
        else:
            _add(ended, tally)
    if len(alive) != len(live):
        live[:] = alive


def _add(into: ProducerTopicMetrics, tally: ProducerTopicMetrics) -> None:
    """Add `tally`'s counts to `into`'s, and keep the later of their last records' dictionaries."""
    for outcome, n in tally.outcomes.items():
        into.outcomes[outcome] = into.outcomes.get(outcome, 0) + n
    into.input_bytes += tally.input_bytes
    into.output_bytes += tally.output_bytes
    into.encode_seconds += tally.encode_seconds
    if tally.at > into.at:
        into.at, into.dictionary = tally.at, tally.dictionary
