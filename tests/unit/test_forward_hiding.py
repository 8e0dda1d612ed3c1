"""Protected topics left out of every response a client is shown (`sidecar.proxy.hiding`): each
response kio knows that can name a topic, walked with every such field naming the registry; the
consumer protocol of the classic group APIs stripped; ordinary topics passed as they came."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from kio.index import load_response_schema
from kio.schema.index import api_key_map
from kio.schema.types import TopicName

from sidecar.proxy import group_protocol
from sidecar.proxy.filters.topics import hidden_keys
from sidecar.proxy.hiding import ResponseHiding, hides
from sidecar.proxy.responses import encode_response
from sidecar.proxy.topics import LISTING
from sidecar.proxy.versions import FETCH, PRODUCE, kio_versions
from tests.kafka_frames import assignment, subscription
from tests.unit.test_forward_access import (
    OFFSETS_ID,
    ORDERS_ID,
    REGISTRY,
    REGISTRY_ID,
    _naming,
    _request_versions,
    _topic_fields,
    _view,
)

OFFSETS = "__consumer_offsets"
#: Responses that name topics but are not walked here, and why.
ELSEWHERE = {
    PRODUCE: "a Produce to a protected topic is refused (its allow-list)",
    FETCH: "filtered as decoded (`fetch`)",
} | dict.fromkeys(LISTING, "the listings `topics` filters")
#: ListConfigResources v0 (ListClientMetricsResources) lists client metrics resources only.
LIST_CONFIG_RESOURCES = 74


def _names_in(entity: Any) -> set[object]:
    """Every topic name and id anywhere in a kio payload (fields found as broadly as
    `_topic_fields` finds them), the consumer protocol bytes included."""
    found: set[object] = set()
    for field in dataclasses.fields(entity):
        value = getattr(entity, field.name)
        for item in value if isinstance(value, tuple) else (value,):
            if dataclasses.is_dataclass(item):
                found |= _names_in(item)
            elif isinstance(item, str | uuid.UUID) and (
                isinstance(item, TopicName) or "topic" in field.name
            ):
                found.add(item)
            elif isinstance(item, bytes):
                for kind in ("subscription", "assignment"):
                    message = group_protocol.read(kind, item, None)
                    if message is not None:
                        found |= set(group_protocol.topics(message))
    return found


def test_every_response_that_can_name_a_topic_is_walked_or_filtered_elsewhere() -> None:
    walked = 0
    for api_key, version in _request_versions():
        cls = load_response_schema(api_key, version)
        if not _topic_fields(cls) or (api_key, version) == (LIST_CONFIG_RESOURCES, 0):
            continue
        if api_key in ELSEWHERE:
            assert not hides(api_key, version)
            continue
        assert hides(api_key, version), f"{cls.__name__} v{version}"
        walked += 1
        hiding = ResponseHiding(_view())
        for name, topic_id in ((REGISTRY, REGISTRY_ID), (OFFSETS, OFFSETS_ID)):
            hidden = hiding.hide(api_key, _naming(cls, name, topic_id))
            assert hidden is not None, f"{cls.__name__} v{version} naming {name}"
            assert not _names_in(hidden) & {name, topic_id}, f"{cls.__name__} v{version}"
            encode_response(1, hidden)
        assert hiding.hide(api_key, _naming(cls, "orders", ORDERS_ID)) is None
    assert walked > 100


def test_offset_fetch_of_every_topic_keeps_the_ordinary_topics_only() -> None:
    cls = load_response_schema(9, 9)
    both = _naming(cls, "orders", ORDERS_ID)
    (group,) = both.groups
    (orders,) = group.topics
    registry = dataclasses.replace(orders, name=TopicName(REGISTRY))
    body = dataclasses.replace(
        both, groups=(dataclasses.replace(group, topics=(registry, orders)),)
    )
    hidden = ResponseHiding(_view()).hide(9, body)
    assert hidden is not None
    assert [t.name for t in hidden.groups[0].topics] == ["orders"]


def test_a_heartbeat_assignment_loses_the_registry_id() -> None:
    cls = load_response_schema(68, 1)
    body = _naming(cls, REGISTRY, REGISTRY_ID)
    (partitions,) = body.assignment.topic_partitions
    assigned = (partitions, dataclasses.replace(partitions, topic_id=ORDERS_ID))
    body = dataclasses.replace(
        body, assignment=dataclasses.replace(body.assignment, topic_partitions=assigned)
    )
    hidden = ResponseHiding(_view()).hide(68, body)
    assert hidden is not None
    assert [p.topic_id for p in hidden.assignment.topic_partitions] == [ORDERS_ID]


def test_classic_group_subscriptions_and_assignments_lose_protected_topics() -> None:
    hiding = ResponseHiding(_view())
    join = _naming(load_response_schema(11, 9), "orders", ORDERS_ID)
    join = dataclasses.replace(
        join,
        protocol_type="consumer",
        members=(dataclasses.replace(join.members[0], metadata=subscription(REGISTRY, "orders")),),
    )
    hidden = hiding.hide(11, join)
    assert hidden is not None
    message = group_protocol.read("subscription", hidden.members[0].metadata, "consumer")
    assert message is not None
    assert group_protocol.topics(message) == ["orders", "orders"]
    assert message.user_data == b"u"
    sync = _naming(load_response_schema(14, 5), "orders", ORDERS_ID)
    for protocol_type in ("consumer", None):
        body = dataclasses.replace(
            sync, protocol_type=protocol_type, assignment=assignment(OFFSETS, "orders")
        )
        hidden = hiding.hide(14, body)
        assert hidden is not None
        assert hidden.assignment == assignment("orders")
    described = _naming(load_response_schema(15, 5), "orders", ORDERS_ID)
    (group,) = described.groups
    member = dataclasses.replace(
        group.members[0],
        member_metadata=subscription(REGISTRY),
        member_assignment=assignment(REGISTRY, "orders"),
    )
    body = dataclasses.replace(
        described,
        groups=(dataclasses.replace(group, protocol_type="consumer", members=(member,)),),
    )
    hidden = hiding.hide(15, body)
    assert hidden is not None
    assert not _names_in(hidden) & {REGISTRY}
    assert hidden.groups[0].members[0].member_assignment == assignment("orders")


def test_other_protocols_bytes_and_ordinary_topics_pass_as_they_came() -> None:
    hiding = ResponseHiding(_view())
    sync = _naming(load_response_schema(14, 5), "orders", ORDERS_ID)
    connect = dataclasses.replace(sync, protocol_type="connect", assignment=assignment(REGISTRY))
    assert hiding.hide(14, connect) is None
    ordinary = dataclasses.replace(sync, protocol_type="consumer", assignment=assignment("orders"))
    assert hiding.hide(14, ordinary) is None
    garbage = dataclasses.replace(sync, protocol_type=None, assignment=b"\x00\x03\xff")
    assert hiding.hide(14, garbage) is None


def test_show_internal_topics_shows_them() -> None:
    cls = load_response_schema(9, 9)
    assert (
        ResponseHiding(_view(show_internal=True)).hide(9, _naming(cls, REGISTRY, REGISTRY_ID))
        is None
    )


def test_a_newer_consumer_protocol_version_is_read_with_the_newest_known() -> None:
    newer = b"\x00\x07" + assignment(REGISTRY)[2:] + b"later fields"
    message = group_protocol.read("assignment", newer, "consumer")
    assert message is not None
    assert group_protocol.topics(message) == [REGISTRY]


def test_the_topics_filter_is_keyed_to_every_version_hiding_walks() -> None:
    keys = hidden_keys()
    for api_key in sorted(api_key_map):
        known = kio_versions(api_key)
        if known is None:
            continue
        low, high = keys.get(api_key, (1, 0))
        for version in range(known[0], known[1] + 1):
            assert hides(api_key, version) is (low <= version <= high), (api_key, version)
