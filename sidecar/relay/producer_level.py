"""The zstd level of the relay's producer batches while it runs: the lowest the active
dictionaries of its input topics chose at training (`kafka.batch_fill.batch_level`), unless
the user set `compression.level`.

librdkafka fixes `compression.level` when a producer is created (one level per producer), so a
dictionary activated with another level is taken up by replacing the producer at a safe point
(`loop.Relay`): everything produced delivered (flushed) and committed, and with exactly once no
transaction open; the new producer, with the same transactional.id, fences the old one as it
initialises its transactions. `ProducerLevel` says when that is due and makes the producer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from confluent_kafka import Producer

from sidecar.kafka.batch_fill import batch_level, configured_level, with_batch_level
from sidecar.namespaces import Namespace

#: Makes the relay's producer with the zstd level chosen at training (None: none chosen).
MakeProducer = Callable[[int | None], Producer]


class ProducerLevel:
    """The level chosen for the relay's producer and the one it compresses at (see the module)."""

    def __init__(self, config: Mapping[str, Any], chosen: int | None, make: MakeProducer) -> None:
        """`config`: the producer's configuration as the user set it (no level chosen added);
        `chosen`: the level the producer was made with; `make`: makes another one."""
        self._config = dict(config)
        self.chosen = chosen
        self.make = make

    def applied(self, chosen: int | None) -> int | None:
        """The zstd level a producer made with `chosen` compresses at (None: not zstd): a
        `compression.level` of the user's wins."""
        return configured_level(with_batch_level(self._config, chosen))

    @property
    def level(self) -> int | None:
        """The zstd level the current producer compresses at."""
        return self.applied(self.chosen)

    @staticmethod
    def wanted(namespaces: Iterable[Namespace]) -> int | None:
        """The level the namespaces' active dictionaries chose (the lowest; None: none)."""
        return batch_level(
            n.encoder.dictionary.meta.batch_level
            for n in namespaces
            if n.encoder.dictionary is not None
        )
