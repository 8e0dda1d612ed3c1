"""What the in-process producer's records store, and what they would have stored without it
(`sidecar.metrics.stored`, path `producer`).

Stored: the record batches the application's producer sent per topic, from librdkafka's
statistics (`topics.<t>.batchsize`: each batch as sent, header and batch codec included;
`batchcnt`: its records). Without zdict: the same records with their raw values, as the same
producer's batches at the same fill with its own `compression.type` and `compression.level` (as
the application configured them: not the batch level zdict chose), estimated from a sample of
the records produced (`stored_estimate.ProducerBatches`): runs of consecutive records over every
topic, a tuple kept, nothing else per record.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sidecar.batch_compression import CODEC_IDS
from sidecar.metrics.stored import PRODUCER, StoredBytes
from sidecar.stored_estimate import SAMPLE_RUN, ProducerBatches, batch_compressor, stride
from sidecar.wire.record_batch import Header


class ProducerStored:
    """The stored bytes of one producer's topics and their estimate without zdict."""

    def __init__(self, metrics: StoredBytes | None, codec: str, level: int | None = None) -> None:
        """`metrics`: where the bytes are counted (None: nowhere, the sample only measures the
        live crossover, `live_crossover`); `codec`: the producer's batch codec
        (`kafka.batch_fill.batch_codec`); one librdkafka does not name as Kafka does (it
        refuses it at start) is not counted; `level`: its zstd level as the application
        configured it (`kafka.batch_fill.configured_level`; None: the default)."""
        self._metrics = metrics
        self._compress = batch_compressor(codec, level) if codec in CODEC_IDS else None
        self.counted = metrics is not None and codec in CODEC_IDS
        self._samples: dict[str, ProducerBatches] = {}
        #: The position of the next record in the sample's cycle (a run taken, then the rest
        #: left), over every topic; counted here, not by a call per record. Every record until
        #: the first window, then one run in as many as the traffic calls for (`stride`).
        self._at = 0
        self._cycle = SAMPLE_RUN
        #: Records offered since the last statistics window.
        self._offered = 0

    def offer(self, topic: str, key: Any, value: bytes | None, headers: Any) -> None:
        """One record produced, as the application gave it (value serialized, before
        compression): the sample takes its runs (`stored_estimate.SAMPLE_RUN`)."""
        at = self._at
        self._offered += 1
        self._at = at + 1 if at + 1 < self._cycle else 0
        if at >= SAMPLE_RUN:
            return
        sample = self._samples.get(topic)
        if sample is None:
            sample = self._samples[topic] = ProducerBatches(self._compress)
        sample.add(key.encode() if isinstance(key, str) else key, value, _headers(headers))

    def sample(self, topic: str) -> ProducerBatches | None:
        """The sample of `topic`'s records (None: none produced yet)."""
        return self._samples.get(topic)

    def on_stats(self, topics: Mapping[str, Any]) -> None:
        """One statistics window (its `topics` object)."""
        every = stride(self._offered)
        self._cycle, self._offered = SAMPLE_RUN * every, 0
        if self._metrics is not None and self.counted:
            self._count(self._metrics, topics)
        # The next window's sampled records stand for as many records each (a copy: producing
        # threads may add a topic meanwhile).
        for sample in list(self._samples.values()):
            sample.every = every

    def _count(self, metrics: StoredBytes, topics: Mapping[str, Any]) -> None:
        """The window's batches of each topic, and their estimate without zdict."""
        for topic, data in topics.items():
            size, count = data.get("batchsize", {}), data.get("batchcnt", {})
            batches, records = int(size.get("cnt", 0)), int(count.get("sum", 0))
            sample = self._samples.get(topic)
            if batches <= 0 or sample is None:
                continue
            stored = int(size.get("sum", 0))
            without = sample.estimate(batches, records)
            metrics.add(
                topic, PRODUCER, batches, records, stored, stored if without is None else without
            )


def _headers(headers: Any) -> tuple[Header, ...]:
    """The application's headers (a list or a dict, values bytes, str or None) as bytes."""
    if not headers:
        return ()
    items = headers.items() if isinstance(headers, dict) else headers
    return tuple((k, v.encode() if isinstance(v, str) else v) for k, v in items)
