"""What an encoding relay's output stores, and what its input's records would have stored without
it (`sidecar.metrics.stored`, path `relay`).

Stored: the record batches the relay's producer sent per output topic, from its statistics
(`topics.<t>.batchsize`: each batch's size as sent, header and batch codec included, checked
against the broker's log segments; `batchcnt`: its records), counted under the input topic
whose output it is (under the output's own name when inputs share it). Without the relay: the
input's records as their producers' own batches at the same fill, with their codec
(`relay.input_compression`), estimated from a sample of the consumed records
(`stored_estimate.ProducerBatches`). Dead-letter topics are left out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from confluent_kafka import Message

from sidecar.metrics.stored import RELAY, StoredBytes
from sidecar.record_batch import Compress
from sidecar.stored_estimate import ProducerBatches
from sidecar.wire.record_batch import Header


class RelayStored:
    """The stored bytes of one encoding relay's outputs, and their estimate without it."""

    def __init__(
        self, metrics: StoredBytes, outputs: Mapping[str, str], compress: Compress | None
    ) -> None:
        """`outputs`: input topic -> output topic; `compress`: the input producers' batch
        codec (`stored_estimate.batch_compressor`)."""
        self._metrics = metrics
        self._samples = {topic: ProducerBatches(compress) for topic in outputs}
        #: Output topic -> the input topics whose output it is.
        self._owners: dict[str, list[str]] = {}
        for topic, output in outputs.items():
            self._owners.setdefault(output, []).append(topic)

    def sample(self, topic: str) -> ProducerBatches:
        """The sample of input `topic`'s records (`live_crossover` measures on it too)."""
        return self._samples[topic]

    def offer(self, topic: str, batch: Sequence[Message]) -> None:
        """The records of input `topic` about to be relayed: the sample takes its share."""
        sample = self._samples[topic]
        for i in sample.picks(len(batch)):
            msg = batch[i]
            # A consumed record's headers are a list of (str, bytes | None) pairs, or None.
            sample.add(msg.key(), msg.value(), cast(Sequence[Header], msg.headers() or ()))

    def on_producer_stats(self, topics: Mapping[str, Any]) -> None:
        """One statistics window of the relay's producer (its `topics` object)."""
        for output, data in topics.items():
            inputs = self._owners.get(output)
            if inputs is None:
                continue
            size, count = data.get("batchsize", {}), data.get("batchcnt", {})
            batches, records = int(size.get("cnt", 0)), int(count.get("sum", 0))
            if batches <= 0:
                continue
            stored = int(size.get("sum", 0))
            without = self._samples[inputs[0]].estimate(batches, records)
            self._metrics.add(
                inputs[0] if len(inputs) == 1 else output,
                RELAY,
                batches,
                records,
                stored,
                stored if without is None else without,
            )
