"""A producer's batches as librdkafka's statistics describe them: the codec its configuration
compresses batches with (and the zstd level it is given, `with_batch_level`), and the fill
(records per batch) of each partition it writes.

librdkafka reports, per statistics window (`statistics.interval.ms`), each topic's record
batches (`topics.<t>.batchcnt`: a window histogram of records per batch; its `cnt` is the
batches, its `sum` their records) and, per partition, the records sent so far (`txmsgs`, a
running total). It does not count batches per partition, so a partition's fill is estimated:
the topic's batches of the window are shared among the partitions that sent records in it,
equally, but no partition gets more batches than it sent records (water-filling). A partition
that sent a few records reads 1 beside a busy one; partitions of equal traffic read the topic's
mean. Partitions of unequal traffic whose batches all fill to the same bound read apart (the
busier higher): an estimate, good enough to tell batches that fill from batches that do not.

Pure: statistics (already parsed from JSON) in, fills out; no client, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from sidecar.record_batch import PRODUCER_ZSTD_LEVEL

#: librdkafka's property names of the batch codec (compression.codec is an alias).
_CODEC_PROPERTIES: Final = ("compression.type", "compression.codec")
#: librdkafka's property of the batch codec's level.
LEVEL_PROPERTY: Final = "compression.level"
#: Its codec when none is configured.
DEFAULT_CODEC: Final = "none"
#: librdkafka's `batch.num.messages` when none is configured.
DEFAULT_BATCH_RECORDS: Final = 10_000


def batch_codec(config: Mapping[str, Any]) -> str:
    """The codec a producer configured with `config` compresses its batches with (the later
    of `compression.type` and its alias `compression.codec` wins, as librdkafka applies the
    properties in order)."""
    codec = DEFAULT_CODEC
    for key, value in config.items():
        if key in _CODEC_PROPERTIES:
            codec = str(value).strip().lower()
    return codec


def batch_level(levels: Iterable[int | None]) -> int | None:
    """The zstd level of one producer's batches for the topics whose levels (chosen at
    training, None: none) are `levels`: librdkafka sets one level per producer, and the lowest
    chosen keeps every topic within its CPU budget. None: none chosen."""
    return min((level for level in levels if level is not None), default=None)


def with_batch_level(config: Mapping[str, Any], level: int | None) -> dict[str, Any]:
    """`config` with `compression.level` `level`, where its batch codec is zstd, a level was
    chosen and the configuration leaves the level unset (a level the user set always wins)."""
    out = dict(config)
    if level is not None and batch_codec(config) == "zstd" and LEVEL_PROPERTY not in config:
        out[LEVEL_PROPERTY] = str(level)
    return out


def configured_level(config: Mapping[str, Any]) -> int | None:
    """The zstd level a producer configured with `config` compresses its batches at (None:
    the codec is not zstd); librdkafka's -1, or no level, is zstd's default (3)."""
    if batch_codec(config) != "zstd":
        return None
    level = int(config.get(LEVEL_PROPERTY, -1))
    return PRODUCER_ZSTD_LEVEL if level < 0 else level


def batch_records(config: Mapping[str, Any]) -> int:
    """The most records a producer configured with `config` puts in one batch
    (`batch.num.messages`, librdkafka's default when unset)."""
    return int(config.get("batch.num.messages", DEFAULT_BATCH_RECORDS))


def share_batches(records: Mapping[int, int], batches: float) -> dict[int, float]:
    """Estimated batches per partition: `batches` shared equally among the partitions of
    `records` (records sent per partition, all positive), none getting more than its records;
    each at least one."""
    share: dict[int, float] = {}
    left, ordered = float(batches), sorted(records.items(), key=lambda item: item[1])
    for i, (partition, sent) in enumerate(ordered):
        equal = left / (len(ordered) - i)
        share[partition] = max(1.0, min(float(sent), equal))
        left = max(0.0, left - share[partition])
    return share


@dataclass(frozen=True, slots=True)
class TopicFill:
    """One statistics window of one topic: its batches, their mean fill, and the estimated fill
    of each partition that sent records in it."""

    batches: int
    mean: float
    partitions: dict[int, float] = field(default_factory=dict)


class BatchFills:
    """Turns each statistics window of a producer into the fills of the topics it wrote
    (`window`); keeps the running `txmsgs` of every partition between windows."""

    def __init__(self, batch_records: int = DEFAULT_BATCH_RECORDS) -> None:
        """`batch_records`: the most records the producer's batches hold (`batch_records`): a
        partition's estimate is never above it (a window's `txmsgs` and `batchcnt` are counted
        at different moments: at 4 a batch, estimates of 5.5 switched raw where frames won)."""
        self._most = float(batch_records)
        self._sent: dict[tuple[str, int], int] = {}

    def window(self, topics: Mapping[str, Any]) -> dict[str, TopicFill]:
        """The fills of the window `topics` (the statistics' `topics` object) reports, per topic
        that sent batches in it."""
        fills: dict[str, TopicFill] = {}
        for topic, data in topics.items():
            records = self._records(topic, data.get("partitions", {}))
            counts = data.get("batchcnt", {})
            batches, total = int(counts.get("cnt", 0)), int(counts.get("sum", 0))
            if batches <= 0 or total <= 0:
                continue
            sent = {p: n for p, n in records.items() if n > 0}
            share = share_batches(sent, batches)
            fills[topic] = TopicFill(
                batches, total / batches, {p: min(sent[p] / share[p], self._most) for p in sent}
            )
        return fills

    def _records(self, topic: str, partitions: Mapping[str, Any]) -> dict[int, int]:
        """Records each partition of `topic` sent since the last window."""
        records: dict[int, int] = {}
        for part, data in partitions.items():
            partition = int(part)
            if partition < 0:  # librdkafka's "unassigned" queue, not a partition
                continue
            now = int(data.get("txmsgs", 0))
            before = self._sent.get((topic, partition), 0)
            self._sent[(topic, partition)] = now
            records[partition] = max(0, now - before)
        return records
