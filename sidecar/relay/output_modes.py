"""Which output partitions the relay writes raw: the output mode (`codec.output_mode`) fed with
its producer's statistics.

Every statistics window of the relay's producer (`events.ClientEvents.on_stats`) gives the fill
(records per batch) of each output partition (`kafka.batch_fill`); with the crossover of the
namespace's active dictionary for the producer's batch codec, `codec.output_mode` decides frames
or raw per partition. An output topic with the input's partition count is decided per
partition; one written by key (librdkafka's partitioner chooses) as a whole, under partition
-1. Each switch is logged (`output_mode_changed`) and shown in `zdict_output_mode`.

Until the producer's first statistics window that reports batches of an output, a partition's
fill is taken from what the relay hands the producer at once: the records of its first consumed
batch for that partition, produced within the producer's linger.ms, which its batches then hold
up to its `batch.num.messages` (a backlog read at full speed goes raw from its first batch when
its batches may hold more records than the crossover, a trickle stays in frames). Windows before
the first records (the relay started ahead of its traffic) leave that start alone: the
statistics take over from the first window with batches on.

`split` then tells the loop which records of a consumed batch go raw: they skip the encoder and
are produced as they came (no header of ours; every decoder passes them through).
`Namespace.encode_with_raw` hands them to the namespace's `pass_raw`: counted under outcome
`raw` at their size, and one in `codec.raw_values.SHADOW_EVERY` shadow-encoded so the live
ratio and drift detection stay measured.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, cast

from confluent_kafka import Message

from sidecar.codec.output_mode import MODES, ModeTable
from sidecar.kafka.batch_fill import DEFAULT_BATCH_RECORDS, BatchFills
from sidecar.logs import get_logger
from sidecar.metrics import Metrics
from sidecar.output_mode_log import log_switch

log = get_logger("sidecar.relay.output_modes")

#: The partition under which a keyed output topic is decided as a whole.
WHOLE_TOPIC: Final = -1

Key = tuple[str, int]


@dataclass(frozen=True, slots=True)
class _Output:
    """One output topic: the input it is written from, how it is partitioned, and the current
    crossover of its namespace's dictionary."""

    topic: str
    per_partition: bool
    crossover: Callable[[], float | None]


class RelayOutputModes:
    """The output mode of every output partition of one relay (see the module)."""

    def __init__(
        self,
        metrics: Metrics,
        *,
        enabled: bool,
        codec: str,
        batch_records: int = DEFAULT_BATCH_RECORDS,
        level: int | None = None,
    ) -> None:
        """`enabled`: false writes frames always (`codec.output_mode: frames`); `codec`: the
        producer's batch codec (`kafka.batch_fill.batch_codec`), whose crossover applies;
        `batch_records`: the most records its batches hold (`kafka.batch_fill.batch_records`);
        `level`: the zstd level it compresses them at (`kafka.batch_fill.configured_level`)."""
        self.enabled = enabled
        self.codec = codec
        self.level = level
        self.batch_records = batch_records
        self._metrics = metrics
        self._fills = BatchFills(batch_records)
        self._table: ModeTable[Key] = ModeTable()
        self._outputs: dict[str, _Output] = {}
        #: Per input topic, its output partitions written raw now (WHOLE_TOPIC: all of them).
        self._raw: dict[str, frozenset[int]] = {}
        #: Per input topic, its output, until a statistics window reports the output's batches.
        self._first: dict[str, str] = {}

    def add(
        self,
        topic: str,
        output: str,
        *,
        per_partition: bool,
        crossover: Callable[[str], float | None],
    ) -> None:
        """Decide the output of input `topic` (an encoding route); `crossover(codec)` reads
        the current crossover of its namespace's active dictionary."""
        codec = self.codec
        self._outputs[output] = _Output(topic, per_partition, lambda: crossover(codec))
        if self.enabled:
            self._first[topic] = output

    def producer_replaced(self, level: int | None) -> None:
        """The relay's producer was replaced by one compressing at zstd `level`: its statistics
        count records from 0 again, and the crossovers are those at `level`."""
        self.level = level
        self._fills = BatchFills()

    def split(self, topic: str, batch: Sequence[Message]) -> list[int] | None:
        """The positions in `batch` (records of input `topic`) that go raw; None when none does
        (the common case: one lookup)."""
        if topic in self._first:
            self._first_fills(topic, batch)
        raw = self._raw.get(topic)
        if not raw:
            return None
        if WHOLE_TOPIC in raw:
            return list(range(len(batch)))
        return [i for i, msg in enumerate(batch) if msg.partition() in raw]

    def _first_fills(self, topic: str, batch: Sequence[Message]) -> None:
        """The fill of each output key of `topic` without one yet: its records in `batch`."""
        output = self._first[topic]
        route = self._outputs[output]
        counts = (
            Counter(cast(int, m.partition()) for m in batch)
            if route.per_partition
            else {WHOLE_TOPIC: len(batch)}
        )
        crossover = route.crossover()
        for partition, records in counts.items():
            if self._table.fill((output, partition)) is None:
                fill = float(min(records, self.batch_records))
                self._observe(output, partition, fill, crossover)
        self._raw[topic] = frozenset(p for (t, p) in self._table.raw if t == output)

    def on_producer_stats(self, topics: Mapping[str, Any]) -> None:
        """One statistics window of the relay's producer (its `topics` object)."""
        if not self.enabled:
            return
        fills = self._fills.window(topics)
        for output, route in self._outputs.items():
            fill = fills.get(output)
            if fill is not None:
                self._first.pop(route.topic, None)
            crossover = route.crossover()
            if route.per_partition:
                partitions = fill.partitions if fill is not None else {}
                seen = {p for (t, p) in self._table.known() if t == output}
                for partition in sorted(seen | set(partitions)):
                    self._observe(output, partition, partitions.get(partition), crossover)
            else:
                self._observe(output, WHOLE_TOPIC, fill.mean if fill else None, crossover)
            self._raw[route.topic] = frozenset(p for (t, p) in self._table.raw if t == output)

    def _observe(
        self, output: str, partition: int, fill: float | None, crossover: float | None
    ) -> None:
        key = (output, partition)
        new = key not in self._table
        switch = self._table.observe(key, fill, crossover)
        if switch is not None:
            log_switch(log, switch, self.codec)
        if switch is not None or new:
            self._metrics.set_output_mode(output, partition, self._table.mode(key), MODES)
