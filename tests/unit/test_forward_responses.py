"""Responses the proxy writes itself (`responses`): kio classes picked
per version, built for any version, framed with the header that version takes."""

from __future__ import annotations

import datetime
import struct

import pytest
from kio.schema.errors import ErrorCode

from sidecar.proxy.responses import build, encode_response, nested, parse_response, response_class
from sidecar.proxy.versions import API_VERSIONS, PRODUCE


def _produce_response(version: int) -> object:
    cls = response_class(PRODUCE, version)
    partition = build(
        nested(cls, "PartitionProduceResponse"),
        index=3,
        error_code=ErrorCode.topic_authorization_failed,
        base_offset=-1,
        log_append_time=None,
        log_start_offset=-1,
        record_errors=(),
        error_message="not allowed",
        current_leader=nested(cls, "LeaderIdAndEpoch")(leader_id=-1, leader_epoch=-1)
        if version >= 10
        else None,
    )
    topic = build(
        nested(cls, "TopicProduceResponse"), name="orders", partition_responses=(partition,)
    )
    return build(cls, responses=(topic,), throttle_time=datetime.timedelta(0), node_endpoints=())


@pytest.mark.parametrize("version", [3, 8, 9, 11])
def test_a_response_built_for_any_version_reads_back_with_its_correlation_id(version: int) -> None:
    frame = encode_response(41, _produce_response(version))

    (size,) = struct.unpack_from(">i", frame)
    assert size == len(frame) - 4
    correlation_id, body = parse_response(PRODUCE, version, frame[4:])
    assert correlation_id == 41
    (partition,) = body.responses[0].partition_responses
    assert body.responses[0].name == "orders"
    assert (partition.index, partition.error_code) == (3, ErrorCode.topic_authorization_failed)


def test_build_leaves_out_the_fields_a_version_does_not_have() -> None:
    old = build(
        response_class(API_VERSIONS, 0),
        error_code=ErrorCode.none,
        api_keys=(),
        throttle_time=datetime.timedelta(0),
    )

    assert not hasattr(old, "throttle_time")
    assert old.error_code == ErrorCode.none


def test_nested_is_the_entry_class_of_the_same_version() -> None:
    v0, v3 = response_class(API_VERSIONS, 0), response_class(API_VERSIONS, 3)

    assert nested(v0, "ApiVersion").__module__ == v0.__module__
    assert nested(v3, "ApiVersion").__module__ == v3.__module__
    assert nested(v0, "ApiVersion") is not nested(v3, "ApiVersion")
