"""Broker addresses rewritten in every version of every response that names brokers: built with
kio, rewritten, written and parsed back: only host and port changed."""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from typing import Any

import pytest
from kio.index import load_response_schema
from kio.schema.errors import ErrorCode

from sidecar.errors import ProtocolError
from sidecar.proxy.addresses import Address, PortMap
from sidecar.proxy.bounded import check, top_level_tags
from sidecar.proxy.filters.broker_addresses import BrokerAddressFilter
from sidecar.proxy.node_addresses import REWRITTEN_FROM, rewrite, upstream_nodes
from sidecar.proxy.produce_response import names_no_broker
from sidecar.proxy.responses import encode_response, parse_response
from sidecar.proxy.versions import (
    DESCRIBE_CLUSTER,
    FIND_COORDINATOR,
    METADATA,
    PRODUCE,
    kio_versions,
)
from tests.unit.forward_messages import filled

ADDRESSES = BrokerAddressFilter(lambda nodes, host: asyncio.sleep(0, dict(nodes)))
UPSTREAM = {1: Address("kafka-1.upstream", 9092), 2: Address("kafka-2.upstream", 19092)}
LOCAL = {1: Address("127.0.0.1", 9101), 2: Address("127.0.0.1", 9102)}


def _versions(api_key: int, first: int = 0) -> list[int]:
    known = kio_versions(api_key)
    assert known is not None
    return list(range(max(first, known[0]), known[1] + 1))


def _class(api_key: int, version: int, name: str) -> Any:
    schema = load_response_schema(api_key, version)
    return getattr(sys.modules[schema.__module__], name)


def _round_trip(api_key: int, version: int, body: Any, local: dict[int, Address | None]) -> Any:
    """`body` as upstream sends it, rewritten by the proxy, as the client reads it."""
    frame = encode_response(5, body)[4:]
    correlation_id, parsed = parse_response(api_key, version, frame)
    assert (correlation_id, parsed) == (5, body)
    assert upstream_nodes(api_key, parsed) == UPSTREAM
    out = encode_response(correlation_id, rewrite(api_key, parsed, local))
    assert _rewritten(api_key, version)
    return parse_response(api_key, version, out[4:])[1]


def _brokers(cls: Any, id_field: str = "node_id") -> tuple[Any, ...]:
    return tuple(
        filled(cls, **{id_field: node_id}, host=a.host, port=a.port, rack=f"rack-{node_id}")
        for node_id, a in UPSTREAM.items()
        if id_field in {f.name for f in dataclasses.fields(cls)}
    )


def _moved(entries: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(
        dataclasses.replace(e, host=LOCAL[i + 1].host, port=LOCAL[i + 1].port)
        for i, e in enumerate(entries)
    )


@pytest.mark.parametrize("version", _versions(METADATA))
def test_metadata_brokers_point_at_the_local_listeners_and_nothing_else_changes(
    version: int,
) -> None:
    cls = load_response_schema(METADATA, version)
    brokers = _brokers(_class(METADATA, version, "MetadataResponseBroker"))
    body = filled(cls, brokers=brokers)
    got = _round_trip(METADATA, version, body, dict(LOCAL))
    assert got == dataclasses.replace(body, brokers=_moved(brokers))
    assert got.topics == body.topics and got.topics  # partitions, leaders, epochs as they came


@pytest.mark.parametrize("version", _versions(DESCRIBE_CLUSTER))
def test_describe_cluster_brokers_point_at_the_local_listeners(version: int) -> None:
    cls = load_response_schema(DESCRIBE_CLUSTER, version)
    brokers = _brokers(_class(DESCRIBE_CLUSTER, version, "DescribeClusterBroker"), "broker_id")
    values: dict[str, Any] = {"brokers": brokers}
    if "endpoint_type" in cls.__dataclass_fields__:
        values["endpoint_type"] = 1
    body = filled(cls, **values)
    got = _round_trip(DESCRIBE_CLUSTER, version, body, dict(LOCAL))
    assert got == dataclasses.replace(body, brokers=_moved(brokers))


def test_describe_cluster_naming_controllers_names_none() -> None:
    cls = load_response_schema(DESCRIBE_CLUSTER, 2)
    brokers = _brokers(_class(DESCRIBE_CLUSTER, 2, "DescribeClusterBroker"), "broker_id")
    body = filled(cls, brokers=brokers, endpoint_type=2)
    assert upstream_nodes(DESCRIBE_CLUSTER, body) == {}
    assert rewrite(DESCRIBE_CLUSTER, body, dict(LOCAL)).brokers == ()


@pytest.mark.parametrize("version", _versions(FIND_COORDINATOR))
def test_find_coordinator_points_at_the_local_listener(version: int) -> None:
    cls = load_response_schema(FIND_COORDINATOR, version)
    node = UPSTREAM[2]
    if version < 4:
        body = filled(cls, node_id=2, host=node.host, port=node.port, error_message=None)
        expected = dataclasses.replace(body, host=LOCAL[2].host, port=LOCAL[2].port)
    else:
        coordinators = (
            filled(
                _class(FIND_COORDINATOR, version, "Coordinator"),
                key="group-a",
                node_id=2,
                host=node.host,
                port=node.port,
            ),
            filled(
                _class(FIND_COORDINATOR, version, "Coordinator"),
                key="group-b",
                node_id=-1,
                host="",
                port=-1,
                error_code=ErrorCode.coordinator_not_available,
            ),
        )
        body = filled(cls, coordinators=coordinators)
        expected = dataclasses.replace(
            body,
            coordinators=(
                dataclasses.replace(coordinators[0], host=LOCAL[2].host, port=LOCAL[2].port),
                coordinators[1],  # an error entry stays as it is
            ),
        )
    frame = encode_response(5, body)[4:]
    _, parsed = parse_response(FIND_COORDINATOR, version, frame)
    assert upstream_nodes(FIND_COORDINATOR, parsed) == {2: node}
    out = encode_response(5, rewrite(FIND_COORDINATOR, parsed, {2: LOCAL[2]}))
    assert parse_response(FIND_COORDINATOR, version, out[4:])[1] == expected


def test_a_coordinator_without_a_local_listener_is_not_available() -> None:
    cls = load_response_schema(FIND_COORDINATOR, 3)
    body = filled(cls, node_id=2, host="kafka-2", port=9092)
    got = rewrite(FIND_COORDINATOR, body, {2: None})
    assert (got.error_code, got.node_id, got.host, got.port) == (
        ErrorCode.coordinator_not_available,
        -1,
        "",
        -1,
    )


@pytest.mark.parametrize("version", _versions(PRODUCE, first=10))
def test_produce_node_endpoints_point_at_the_local_listeners(version: int) -> None:
    cls = load_response_schema(PRODUCE, version)
    endpoints = _brokers(_class(PRODUCE, version, "NodeEndpoint"))
    body = filled(cls, node_endpoints=endpoints)
    got = _round_trip(PRODUCE, version, body, dict(LOCAL))
    assert got == dataclasses.replace(body, node_endpoints=_moved(endpoints))
    assert got.responses == body.responses


@pytest.mark.parametrize("version", _versions(PRODUCE, first=10))
def test_a_produce_response_naming_no_broker_passes_unparsed(version: int) -> None:
    cls = load_response_schema(PRODUCE, version)
    plain = encode_response(5, filled(cls, node_endpoints=()))[4:]
    named = encode_response(
        5, filled(cls, node_endpoints=_brokers(_class(PRODUCE, version, "NodeEndpoint")))
    )[4:]
    assert names_no_broker(PRODUCE, version, plain)
    assert not names_no_broker(PRODUCE, version, named)
    assert not names_no_broker(METADATA, 12, plain)  # the other APIs are always parsed


def test_a_produce_response_running_past_its_frame_is_refused() -> None:
    cls = load_response_schema(PRODUCE, 11)
    frame = encode_response(5, filled(cls, node_endpoints=()))[4:]
    with pytest.raises(ProtocolError, match="past the end"):
        names_no_broker(PRODUCE, 11, frame[:-3])


def _rewritten(api_key: int, version: int) -> bool:
    """Whether the broker address filter is keyed to `api_key` in `version`."""
    versions = ADDRESSES.response_keys.get(api_key)
    return versions is not None and versions[0] <= version <= versions[1]


def test_produce_before_v10_is_not_parsed() -> None:
    assert not _rewritten(PRODUCE, 9)
    assert _rewritten(PRODUCE, 10)
    assert not _rewritten(1, 15)  # Fetch passes as it is
    assert {k: v[0] for k, v in ADDRESSES.response_keys.items()} == REWRITTEN_FROM


def test_a_broker_without_a_local_listener_is_left_out() -> None:
    cls = load_response_schema(METADATA, 12)
    brokers = _brokers(_class(METADATA, 12, "MetadataResponseBroker"))
    body = filled(cls, brokers=brokers)
    got = rewrite(METADATA, body, {1: LOCAL[1], 2: None})
    assert [(b.node_id, b.host, b.port) for b in got.brokers] == [(1, "127.0.0.1", 9101)]


@pytest.mark.parametrize(
    ("base", "node_id", "port"),
    [
        (9100, 1, 9101),
        (9100, 0, 9100),
        (65000, 535, 65535),
        (65000, 536, None),
        (0, 0, None),
        (9100, -9100, None),
    ],
)
def test_the_port_map_is_base_plus_node_id_within_1_to_65535(
    base: int, node_id: int, port: int | None
) -> None:
    assert PortMap(base).port(node_id) == port


def _busy_produce_response(version: int, *, named: bool) -> bytes:
    """A ProduceResponse frame of `version` with two topics of two partitions, each with two
    record errors, messages, a current leader; node endpoints when `named`."""
    cls = load_response_schema(PRODUCE, version)
    error = filled(_class(PRODUCE, version, "BatchIndexAndErrorMessage"))
    errors = (error, dataclasses.replace(error, batch_index_error_message="bad record"))
    partition = filled(_class(PRODUCE, version, "PartitionProduceResponse"), record_errors=errors)
    partitions = (
        dataclasses.replace(partition, error_message="not the leader"),
        dataclasses.replace(
            partition,
            index=2,
            current_leader=_class(PRODUCE, version, "LeaderIdAndEpoch")(
                leader_id=3, leader_epoch=9
            ),
        ),
    )
    topic = filled(_class(PRODUCE, version, "TopicProduceResponse"), partition_responses=partitions)
    endpoints = _brokers(_class(PRODUCE, version, "NodeEndpoint")) if named else ()
    body = filled(cls, responses=(topic, topic), node_endpoints=endpoints)
    return encode_response(5, body)[4:]


@pytest.mark.parametrize("named", [False, True])
@pytest.mark.parametrize("version", _versions(PRODUCE, first=10))
def test_the_hand_walk_of_produce_responses_agrees_with_the_schema_walk_on_every_prefix(
    version: int, named: bool
) -> None:
    frame = _busy_produce_response(version, named=named)
    schema = load_response_schema(PRODUCE, version)

    def by_schema(data: bytes) -> bool | str:
        try:
            return top_level_tags(schema, data, check(schema.__header_schema__, data)) == 0
        except ProtocolError:
            return "refused"

    def by_hand(data: bytes) -> bool | str:
        try:
            return names_no_broker(PRODUCE, version, data)
        except ProtocolError:
            return "refused"

    assert by_hand(frame) is (not named)
    for cut in range(len(frame) + 1):
        assert by_hand(frame[:cut]) == by_schema(frame[:cut]), cut
