"""The consumer protocol inside the classic group APIs: the topics a member subscribes to
(`ConsumerProtocolSubscription`, JoinGroup's member metadata) and the partitions it is assigned
(`ConsumerProtocolAssignment`, SyncGroup's assignment), carried as opaque bytes that the broker
never reads: the client's own leader computes the assignment. The proxy reads them to refuse a
subscription or an assignment naming a protected topic (`access`) and to strip protected topics
from what a member is shown (`hiding`).

The bytes are a 2-byte version, then the message in that version (not flexible). A version
above kio's newest is read with the newest, as Kafka's clients read it (newer versions only add
fields at the end). Bytes of another protocol (`protocol_type` other than `consumer`, such as
Kafka Connect's) or that do not parse as the consumer's are left as they are.
"""

from __future__ import annotations

import dataclasses
import io
import struct
from collections.abc import Callable
from typing import Any, Final, Literal

from kio.schema.consumer_protocol_assignment.v0 import (
    ConsumerProtocolAssignment as AssignmentV0,
)
from kio.schema.consumer_protocol_assignment.v1 import (
    ConsumerProtocolAssignment as AssignmentV1,
)
from kio.schema.consumer_protocol_assignment.v2 import (
    ConsumerProtocolAssignment as AssignmentV2,
)
from kio.schema.consumer_protocol_assignment.v3 import (
    ConsumerProtocolAssignment as AssignmentV3,
)
from kio.schema.consumer_protocol_subscription.v0 import (
    ConsumerProtocolSubscription as SubscriptionV0,
)
from kio.schema.consumer_protocol_subscription.v1 import (
    ConsumerProtocolSubscription as SubscriptionV1,
)
from kio.schema.consumer_protocol_subscription.v2 import (
    ConsumerProtocolSubscription as SubscriptionV2,
)
from kio.schema.consumer_protocol_subscription.v3 import (
    ConsumerProtocolSubscription as SubscriptionV3,
)
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import SerialError

#: What the bytes carry: a member's subscription or its assignment.
Kind = Literal["subscription", "assignment"]
CONSUMER: Final = "consumer"
_VERSION: Final = struct.Struct(">h")
_CLASSES: Final[dict[str, tuple[type[Any], ...]]] = {
    "subscription": (SubscriptionV0, SubscriptionV1, SubscriptionV2, SubscriptionV3),
    "assignment": (AssignmentV0, AssignmentV1, AssignmentV2, AssignmentV3),
}


def read(kind: Kind, data: bytes | None, protocol_type: str | None) -> Any | None:
    """The consumer protocol message `data` carries (None: another protocol's, or bytes that
    do not parse as one; `protocol_type` None: not said, the bytes decide)."""
    if not data or (protocol_type is not None and protocol_type != CONSUMER):
        return None
    if len(data) < _VERSION.size:
        return None
    version = _VERSION.unpack_from(data)[0]
    if version < 0:
        return None
    classes = _CLASSES[kind]
    cls = classes[min(version, len(classes) - 1)]
    try:
        message, _ = entity_reader(cls)(data, _VERSION.size)
    except (SerialError, ValueError, TypeError, OverflowError, IndexError, UnicodeDecodeError):
        return None
    return message


def write(message: Any) -> bytes:
    """The bytes of consumer protocol `message` (read by `read`), in its own version."""
    buffer = io.BytesIO()
    buffer.write(_VERSION.pack(type(message).__version__))
    entity_writer(type(message))(buffer, message)
    return buffer.getvalue()


def topics(message: Any) -> list[str]:
    """Every topic name consumer protocol `message` (read by `read`) carries."""
    names = [str(t) for t in getattr(message, "topics", ())]
    names.extend(str(p.topic) for p in _partitions(message))
    return names


def strip(message: Any, hidden: Callable[[str], bool]) -> Any | None:
    """`message` (read by `read`) without the topics `hidden` says; None: it names none."""
    if not any(hidden(name) for name in topics(message)):
        return None
    changes: dict[str, Any] = {}
    if hasattr(message, "topics"):
        changes["topics"] = tuple(t for t in message.topics if not hidden(str(t)))
    for field in _PARTITION_FIELDS:
        if hasattr(message, field):
            kept = tuple(p for p in getattr(message, field) if not hidden(str(p.topic)))
            changes[field] = kept
    return dataclasses.replace(message, **changes)


#: The fields of topic partitions: a subscription's owned ones (v1 on), an assignment's.
_PARTITION_FIELDS: Final = ("owned_partitions", "assigned_partitions")


def _partitions(message: Any) -> tuple[Any, ...]:
    found: tuple[Any, ...] = ()
    for field in _PARTITION_FIELDS:
        found += getattr(message, field, ())
    return found
