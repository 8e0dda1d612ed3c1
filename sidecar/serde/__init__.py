"""Compression before the broker, in the application's process: confluent-kafka serdes and
clients that follow the registry.

* `ZdictSerializer` / `ZdictDeserializer`: confluent-kafka's `Serializer` / `Deserializer`,
  for `SerializingProducer` / `DeserializingConsumer`, composable with the application's own.
* `ZdictProducer` (a drop-in for `Producer`), `ZdictSerializingProducer` (for
  `SerializingProducer`), `ZdictConsumer` (for `Consumer`): they add and remove the `zd` header
  themselves.
* `FollowingEncoder`: the active dictionary of each namespace, as the registry says.
* `ProducerMetrics`: the producer side's metrics, on the application's `CollectorRegistry`.

README, "In-process: serializer and producer", says when to use this rather than the relay.
"""

from sidecar.serde.consumer import ZdictConsumer
from sidecar.serde.following import FollowingEncoder
from sidecar.serde.metrics import ProducerMetrics
from sidecar.serde.producer import ZdictProducer, ZdictSerializingProducer
from sidecar.serde.serializer import ZdictDeserializer, ZdictSerializer

__all__ = [
    "FollowingEncoder",
    "ProducerMetrics",
    "ZdictConsumer",
    "ZdictDeserializer",
    "ZdictProducer",
    "ZdictSerializer",
    "ZdictSerializingProducer",
]
