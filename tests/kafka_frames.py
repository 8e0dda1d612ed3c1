"""Kafka requests and responses as a client writes and reads them (kio), for the proxy's tests."""

from __future__ import annotations

import io
import struct
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.consumer_protocol_assignment.v3 import ConsumerProtocolAssignment
from kio.schema.consumer_protocol_assignment.v3.data import TopicPartition as AssignedPartition
from kio.schema.consumer_protocol_subscription.v1 import ConsumerProtocolSubscription
from kio.schema.consumer_protocol_subscription.v1.data import TopicPartition as OwnedPartition
from kio.schema.types import TopicName
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

from sidecar.proxy import group_protocol


def request_frame(api_key: int, version: int, correlation_id: int, **body: Any) -> bytes:
    """A request frame (size prefix included) as a client sends it."""
    schema = load_request_schema(api_key, version)
    header_class = schema.__header_schema__
    buffer = io.BytesIO()
    header = header_class(
        request_api_key=i16(api_key),
        request_api_version=i16(version),
        correlation_id=i32(correlation_id),
        client_id="test-client",
    )
    entity_writer(header_class)(buffer, header)
    entity_writer(schema)(buffer, schema(**body))
    data = buffer.getvalue()
    return struct.pack(">i", len(data)) + data


def nested(api_key: int, version: int, name: str, request: bool = True) -> Any:
    """A nested class of a request (or response) version, e.g. its topic entries."""
    import sys

    schema = (load_request_schema if request else load_response_schema)(api_key, version)
    return getattr(sys.modules[schema.__module__], name)


def read_response(api_key: int, version: int, frame: bytes) -> tuple[int, Any]:
    """(correlation id, body) of a response frame without its size prefix."""
    schema = load_response_schema(api_key, version)
    header, used = entity_reader(schema.__header_schema__)(frame, 0)
    body, _ = entity_reader(schema)(frame, used)
    return header.correlation_id, body


def subscription(*topics: str) -> bytes:
    """Consumer protocol bytes of a subscription to `topics`, owning partition 0 of each."""
    owned = tuple(OwnedPartition(topic=TopicName(t), partitions=(i32(0),)) for t in topics)
    return group_protocol.write(
        ConsumerProtocolSubscription(topics=topics, owned_partitions=owned, user_data=b"u")
    )


def assignment(*topics: str) -> bytes:
    """Consumer protocol bytes of an assignment of partition 0 of each of `topics`."""
    assigned = tuple(AssignedPartition(topic=TopicName(t), partitions=(i32(0),)) for t in topics)
    return group_protocol.write(
        ConsumerProtocolAssignment(assigned_partitions=assigned, user_data=None)
    )
