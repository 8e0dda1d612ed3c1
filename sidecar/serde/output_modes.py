"""Which partitions the in-process producer writes raw: the output mode (`codec.output_mode`) fed
with the statistics of the application's producer.

Every statistics window (`stats_cb`, every `statistics.interval.ms`) gives the fill (records per
batch) of each partition the producer wrote (`kafka.batch_fill`) and of each topic as a whole;
with the crossover of the topic's dictionary for the producer's batch codec, `codec.output_mode`
decides frames or raw. A record produced to a partition of its own choosing is decided by that
partition; one left to librdkafka's partitioner (partition -1) by its topic as a whole. Each switch
is logged (`output_mode_changed`) and shown in `zdict_producer_output_mode`.

`raw` is read once per record (`(topic, partition) in raw`); the statistics replace it whole, so
producing threads need no lock.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from sidecar.codec.output_mode import ModeTable
from sidecar.kafka.batch_fill import DEFAULT_BATCH_RECORDS, BatchFills
from sidecar.logs import get_logger
from sidecar.output_mode_log import log_switch
from sidecar.serde.metrics import ProducerMetrics

log = get_logger("sidecar.serde.output_modes")

#: The partition a record left to librdkafka's partitioner is produced to (RD_KAFKA_PARTITION_UA).
ANY_PARTITION: Final = -1

Key = tuple[str, int]


class ProducerOutputModes:
    """The output mode of every (topic, partition) one producer writes (see the module)."""

    def __init__(
        self,
        codec: str,
        crossover: Callable[[str, str], float | None],
        metrics: ProducerMetrics | None = None,
        batch_records: int = DEFAULT_BATCH_RECORDS,
    ) -> None:
        """`codec`: the producer's batch codec (`kafka.batch_fill.batch_codec`);
        `crossover(topic, codec)`: the crossover of the dictionary that compresses `topic` now
        (None: none, or unknown); `metrics`: where the modes are shown; `batch_records`: the
        most records its batches hold (`kafka.batch_fill.batch_records`)."""
        self.codec = codec
        self._crossover = crossover
        self._metrics = metrics
        self._fills = BatchFills(batch_records)
        self._table: ModeTable[Key] = ModeTable()
        #: The (topic, partition) pairs written raw now (ANY_PARTITION: left to the partitioner).
        self.raw: frozenset[Key] = frozenset()

    def on_stats(self, topics: dict[str, Any]) -> None:
        """One statistics window (its `topics` object)."""
        fills = self._fills.window(topics)
        for topic in sorted({t for t, _ in self._table.known()} | set(fills)):
            fill = fills.get(topic)
            crossover = self._crossover(topic, self.codec)
            partitions = fill.partitions if fill is not None else {}
            seen = {p for t, p in self._table.known() if t == topic and p != ANY_PARTITION}
            for partition in sorted(seen | set(partitions)):
                self._observe(topic, partition, partitions.get(partition), crossover)
            self._observe(topic, ANY_PARTITION, fill.mean if fill else None, crossover)
        self.raw = frozenset(self._table.raw)
        if self._metrics is not None:
            self._metrics.set_output_modes({k: self._table.mode(k) for k in self._table.known()})

    def _observe(
        self, topic: str, partition: int, fill: float | None, crossover: float | None
    ) -> None:
        switch = self._table.observe((topic, partition), fill, crossover)
        if switch is not None:
            log_switch(log, switch, self.codec)
