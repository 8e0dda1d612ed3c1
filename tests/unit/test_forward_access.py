"""What a request may do through the proxy (`sidecar.proxy.access`): admin APIs
refused with their own response and left out of ApiVersions unless forwarded, internal topics
and the registry topic refused by name, id and resource in every request kio knows that can name
one, ids no listing named refused where records are read or changed, Metadata bounded."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import enum
import random
import types
import typing
import uuid
from typing import Any

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.schema.types import TopicName
from kio.static.constants import EntityType
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from sidecar.dictionaries.registry_state import INDEX_SUFFIX
from sidecar.errors import ProtocolError
from sidecar.proxy.access import ACL_APIS, UNCHECKED, RequestAccess, topic_keys
from sidecar.proxy.filters.api_versions import filter_api_versions
from sidecar.proxy.frames import read_request_header
from sidecar.proxy.metrics import ForwardMetrics
from sidecar.proxy.responses import encode_response
from sidecar.proxy.topics import TopicView
from sidecar.proxy.versions import (
    CLIENT_APIS,
    DESCRIBE_ACLS,
    REMOVED,
    admin_apis,
    request_header_version,
    served_versions,
)
from tests.kafka_frames import assignment, read_response, request_frame, subscription
from tests.unit.forward_messages import filled
from tests.unit.test_forward_connection import _bootstrap, _read_frame, running

REGISTRY = "_zdict_dictionaries"
REGISTRY_ID = uuid.UUID(int=0xD1C7)
OFFSETS_ID = uuid.UUID(int=0x0FF5)
ORDERS_ID = uuid.UUID(int=0x0DE5)
#: Mutating admin APIs issue 37 names: all refused by default.
MUTATING = {19, 20, 21, 27, 30, 31, 33, 37, 38, 42, 43, 44, 45, 47, 51, 57, 64}


@dataclasses.dataclass
class _Listing:
    name: str
    topic_id: uuid.UUID
    is_internal: bool = False


def _view(*, show_internal: bool = False) -> TopicView:
    view = TopicView(REGISTRY, show_internal=show_internal)
    view.learn(
        [
            _Listing(REGISTRY, REGISTRY_ID),
            _Listing("__consumer_offsets", OFFSETS_ID, is_internal=True),
            _Listing("orders", ORDERS_ID),
        ]
    )
    return view


def _access(**kwargs: Any) -> tuple[RequestAccess, CollectorRegistry]:
    registry = CollectorRegistry()
    view = kwargs.pop("view", None) or _view()
    return RequestAccess(view, ForwardMetrics(registry), **kwargs), registry


def _check(access: RequestAccess, frame: bytes) -> bytes | None:
    """`access`'s answer to the request frame `frame` (size prefix included)."""
    body = frame[4:]
    api_key, version = int.from_bytes(body[:2], "big"), int.from_bytes(body[2:4], "big")
    header = read_request_header(body, request_header_version(api_key, version))
    return access.refusal(body, header)


def _naming(cls: type[Any], name: str, topic_id: uuid.UUID) -> Any:
    """A request (or entity) of kio class `cls` naming topic `name` and `topic_id` in every
    field that can: topic names, topic ids, config resources and ACLs of a topic, literal."""
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        values[field.name] = _named_value(field.name, hints[field.name], name, topic_id)
    return cls(**values)


def _named_value(field: str, hint: Any, name: str, topic_id: uuid.UUID) -> Any:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    if typing.get_origin(hint) is tuple:
        item = typing.get_args(hint)[0]
        return (_named_value(field, item, name, topic_id),)
    if dataclasses.is_dataclass(hint):
        return _naming(typing.cast(type[Any], hint), name, topic_id)
    if hint is TopicName or field in ("resource_name", "resource_name_filter"):
        return TopicName(name)
    if hint is uuid.UUID and field == "topic_id":
        return topic_id
    if field in ("resource_type", "resource_type_filter"):
        return 2  # a topic, for config resources and ACLs alike
    if field in ("resource_pattern_type", "pattern_type_filter"):
        return 3  # literal
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return ErrorCode.none if issubclass(hint, ErrorCode) else next(iter(hint))
    for kind, value in (
        (bool, False),
        (int, 1),
        (float, 1.0),
        (str, "s"),
        (datetime.timedelta, datetime.timedelta(milliseconds=5)),
        (datetime.datetime, datetime.datetime(2025, 1, 1, tzinfo=datetime.UTC)),
        (uuid.UUID, uuid.UUID(int=7)),
        (bytes, b""),
    ):
        if isinstance(hint, type) and issubclass(hint, kind):
            return hint.parse(value) if hasattr(hint, "parse") else value
    raise TypeError(f"no test value for {hint!r}")


def _request_versions() -> list[tuple[int, int]]:
    found = []
    for api_key, name in api_key_map.items():
        for version, entities in schema_name_map[name].items():
            if EntityType.request in entities and EntityType.response in entities:
                found.append((api_key, version))
    return sorted(found)


def _topic_fields(cls: type[Any], path: str = "") -> list[str]:
    """Every field of a request class that could name a topic, found more broadly than the
    proxy looks: a topic name, a uuid named for a topic, any field whose name says topic or
    resource name (a bool or an int count excepted)."""
    hints = typing.get_type_hints(cls)
    found = []
    for field in dataclasses.fields(cls):
        hint = hints[field.name]
        if typing.get_origin(hint) in (typing.Union, types.UnionType):
            hint = next(a for a in typing.get_args(hint) if a is not type(None))
        if typing.get_origin(hint) is tuple:
            hint = typing.get_args(hint)[0]
        where = f"{path or cls.__name__}.{field.name}"
        if dataclasses.is_dataclass(hint):
            found += _topic_fields(typing.cast(type[Any], hint), where)
        elif hint is TopicName or (
            ("topic" in field.name or "resource_name" in field.name) and hint is not bool
        ):
            found.append(where)
    return found


# -- admin APIs --------------------------------------------------------------------------------


def test_every_api_kio_knows_is_a_client_api_an_admin_api_or_removed() -> None:
    assert set(api_key_map) == set(CLIENT_APIS) | admin_apis() | set(REMOVED)
    assert not set(CLIENT_APIS) & admin_apis()
    assert admin_apis() >= MUTATING, "every mutating API issue 37 names is an admin API"
    for api_key, name in CLIENT_APIS.items():
        assert "".join(p.capitalize() for p in api_key_map[api_key].split("_")) == name


@pytest.mark.parametrize("api_key", sorted(MUTATING))
def test_an_admin_api_is_refused_with_its_own_response_counted_and_logged_once(
    api_key: int,
) -> None:
    access, registry = _access()
    low, high = served_versions(api_key) or (0, 0)
    with capture_logs() as logs:
        for version in range(low, high + 1):
            frame = request_frame(api_key, version, 9, **_fields_of(api_key, version))
            answer = _check(access, frame)
            assert answer is not None, f"v{version} refused"
            correlation_id, body = read_response(api_key, version, answer[4:])
            assert correlation_id == 9
            errors = set(_error_codes(body)) - {ErrorCode.none}
            assert errors == {ErrorCode.cluster_authorization_failed}, f"v{version}"
    assert [e["event"] for e in logs] == ["request_refused_by_proxy"]
    assert "ZDICT_PROXY__ADMIN_APIS" in logs[0]["detail"]
    count = registry.get_sample_value(
        "zdict_proxy_refused_requests_total", {"api": logs[0]["api"], "reason": "admin_api"}
    )
    assert count == high - low + 1


def _frame(api_key: int, version: int, correlation_id: int, body: Any, **changes: Any) -> bytes:
    """The request frame of kio payload `body`, `changes` made to its fields."""
    fields = {f.name: getattr(body, f.name) for f in dataclasses.fields(body)}
    return request_frame(api_key, version, correlation_id, **(fields | changes))


def _fields_of(api_key: int, version: int) -> dict[str, Any]:
    """The fields of a request naming an ordinary topic, for `request_frame`."""
    body = _naming(load_request_schema(api_key, version), "orders", ORDERS_ID)
    return {f.name: getattr(body, f.name) for f in dataclasses.fields(body)}


def _error_codes(entity: Any) -> list[ErrorCode]:
    """Every error code of a kio payload, nested entries included."""
    found = []
    for field in dataclasses.fields(entity):
        value = getattr(entity, field.name)
        for item in value if isinstance(value, tuple) else (value,):
            if isinstance(item, ErrorCode):
                found.append(item)
            elif dataclasses.is_dataclass(item):
                found += _error_codes(item)
    return found


def test_forwarded_admin_apis_naming_ordinary_topics_pass() -> None:
    access, _ = _access(admin="forward")
    for api_key in sorted(MUTATING):
        low, high = served_versions(api_key) or (0, 0)
        for version in range(low, high + 1):
            frame = request_frame(api_key, version, 1, **_fields_of(api_key, version))
            if api_key in ACL_APIS:
                continue  # ACLs on "orders": see the ACL test
            assert _check(access, frame) is None, (api_key, version)


def test_api_versions_leaves_out_the_refused_apis() -> None:
    access, _ = _access()
    cls = load_response_schema(18, 3)
    entry = typing.get_type_hints(cls)["api_keys"]
    entry_cls = typing.get_args(entry)[0]
    upstream = filled(
        cls, api_keys=tuple(entry_cls(api_key=k, min_version=4, max_version=4) for k in (1, 20, 3))
    )
    got = filter_api_versions(upstream, False, access.refused_apis)
    assert [e.api_key for e in got.api_keys] == [1, 3]
    forwarded, _ = _access(admin="forward")
    got = filter_api_versions(upstream, False, forwarded.refused_apis)
    assert [e.api_key for e in got.api_keys] == [1, 20, 3]


# -- protected topics --------------------------------------------------------------------------


def test_every_request_field_that_can_name_a_topic_is_checked_or_said_why_not() -> None:
    """Walks every request kio knows: a field that can name a topic is found by the proxy
    (`topic_keys`) or listed in `UNCHECKED` with why; an API new to kio carrying one fails
    here until it is."""
    missed = []
    for api_key, version in _request_versions():
        cls = load_request_schema(api_key, version)
        fields = _topic_fields(cls)
        if not fields or api_key in REMOVED or api_key == DESCRIBE_ACLS:
            continue
        named = list(topic_keys(api_key, _naming(cls, REGISTRY, REGISTRY_ID)))
        found = {k.name for k in named} | {k.topic_id for k in named}
        assert found - {None} <= {REGISTRY, REGISTRY_ID}
        for field in fields:
            if field in UNCHECKED:
                continue
            # Each field alone naming the registry: the proxy sees it.
            if not _found_alone(api_key, cls, field):
                missed.append(f"{field} (v{version})")
    assert missed == []


def _found_alone(api_key: int, cls: type[Any], field: str) -> bool:
    """Whether `topic_keys` finds the registry when only `field` (a path) names it."""
    other = _naming(cls, "orders", ORDERS_ID)
    parts = field.split(".")[1:]
    marked = _replace_path(other, parts)
    return any(k.name == REGISTRY or k.topic_id == REGISTRY_ID for k in topic_keys(api_key, marked))


def _replace_path(entity: Any, parts: list[str]) -> Any:
    value = getattr(entity, parts[0])
    if len(parts) == 1:
        hint = typing.get_type_hints(type(entity))[parts[0]]
        new = _named_value(parts[0], hint, REGISTRY, REGISTRY_ID)
        return dataclasses.replace(entity, **{parts[0]: new})
    if isinstance(value, tuple):
        value = tuple(_replace_path(v, parts[1:]) for v in value)
    elif value is not None:
        value = _replace_path(value, parts[1:])
    return dataclasses.replace(entity, **{parts[0]: value})


@pytest.mark.parametrize("admin", ["refuse", "forward"])
def test_every_served_request_naming_the_registry_is_refused_whatever_admin_apis_says(
    admin: str,
) -> None:
    access, _ = _access(admin=admin)
    refused = 0
    for api_key, version in _request_versions():
        if served_versions(api_key) is None or not served_versions(api_key):
            continue
        low, high = served_versions(api_key) or (0, -1)
        if not low <= version <= high or api_key in (0, DESCRIBE_ACLS, 17, 36):
            continue  # Produce: its allow-list; SASL: answered by `client_sasl`
        cls = load_request_schema(api_key, version)
        if not _topic_fields(cls):
            continue
        for name, topic_id in ((REGISTRY, REGISTRY_ID), ("__consumer_offsets", OFFSETS_ID)):
            body = _naming(cls, name, topic_id)
            frame = request_frame(
                api_key,
                version,
                3,
                **{f.name: getattr(body, f.name) for f in dataclasses.fields(body)},
            )
            answer = _check(access, frame)
            assert answer is not None, f"{cls.__name__} v{version} naming {name}"
            _, response = read_response(api_key, version, answer[4:])
            codes = set(_error_codes(response))
            expected = (
                ErrorCode.cluster_authorization_failed
                if access.refused_apis and api_key in access.refused_apis
                else ErrorCode.topic_authorization_failed
            )
            assert expected in codes, (cls.__name__, version, codes)
            refused += 1
    assert refused > 100


def test_a_fetch_by_the_registry_id_gets_topic_authorization_failed_per_partition() -> None:
    access, _ = _access()
    frame = request_frame(1, 17, 4, **_fields_of(1, 17) | {"topics": _fetch_topics(REGISTRY_ID)})
    answer = _check(access, frame)
    assert answer is not None
    _, body = read_response(1, 17, answer[4:])
    assert body.error_code == ErrorCode.none, "the session is not in question"
    (topic,) = body.responses
    assert topic.topic_id == REGISTRY_ID
    assert [p.error_code for p in topic.partitions] == [ErrorCode.topic_authorization_failed]
    assert topic.partitions[0].records is None


def _fetch_topics(*ids: uuid.UUID) -> tuple[Any, ...]:
    template = _naming(load_request_schema(1, 17), "x", ORDERS_ID).topics[0]
    return tuple(dataclasses.replace(template, topic_id=i) for i in ids)


def test_a_fetch_by_an_id_no_listing_named_is_refused_until_one_does() -> None:
    view = _view()
    access, registry = _access(view=view)
    new = uuid.UUID(int=0xBEEF)
    frame = request_frame(1, 17, 4, **_fields_of(1, 17) | {"topics": _fetch_topics(ORDERS_ID, new)})
    answer = _check(access, frame)
    assert answer is not None
    _, body = read_response(1, 17, answer[4:])
    errors = {t.topic_id: [p.error_code for p in t.partitions] for t in body.responses}
    assert errors == {
        ORDERS_ID: [ErrorCode.not_leader_or_follower],  # retried after a metadata refresh
        new: [ErrorCode.unknown_topic_id],
    }
    assert registry.get_sample_value(
        "zdict_proxy_refused_requests_total", {"api": "Fetch", "reason": "unknown_topic_id"}
    )
    view.learn([_Listing("payments", new)])
    assert _check(access, frame) is None


def test_a_new_internal_topic_learned_from_a_listing_is_refused_by_id() -> None:
    view = _view()
    access, _ = _access(view=view)
    state = uuid.UUID(int=0x7A5)
    view.learn([_Listing("__transaction_state", state, is_internal=True)])
    for _ in range(3):  # the other ids never push a protected one out
        view.learn([_Listing(f"t{i}", uuid.UUID(int=1000 + i)) for i in range(10)])
    frame = request_frame(1, 13, 4, **_fields_of(1, 13) | {"topics": _fetch_topics(state)})
    answer = _check(access, frame)
    assert answer is not None
    _, body = read_response(1, 13, answer[4:])
    assert body.responses[0].partitions[0].error_code == ErrorCode.topic_authorization_failed


def test_a_protected_name_beside_an_ordinary_id_is_refused() -> None:
    access, _ = _access(admin="forward")
    body = _naming(load_request_schema(20, 6), REGISTRY, ORDERS_ID)
    answer = _check(access, _frame(20, 6, 1, body))
    assert answer is not None
    _, response = read_response(20, 6, answer[4:])
    assert [r.error_code for r in response.responses] == [ErrorCode.topic_authorization_failed]


def test_records_of_every_protected_topic_are_kept_out_of_fetch_responses() -> None:
    view = _view()
    assert view.refused(view.name(OFFSETS_ID)) and view.refused(view.name(REGISTRY_ID))
    assert not view.refused(view.name(ORDERS_ID))
    assert not _view(show_internal=True).refused(REGISTRY)


def test_show_internal_topics_lets_reads_pass_but_never_changes() -> None:
    access, _ = _access(view=_view(show_internal=True), admin="forward")
    fetch = request_frame(1, 17, 4, **_fields_of(1, 17) | {"topics": _fetch_topics(REGISTRY_ID)})
    assert _check(access, fetch) is None
    body = _naming(load_request_schema(21, 2), REGISTRY, REGISTRY_ID)
    delete = request_frame(21, 2, 5, topics=body.topics, timeout=body.timeout)
    assert _check(access, delete) is not None


def test_unknown_ids_pass_in_group_apis_and_metadata() -> None:
    access, _ = _access()
    new = uuid.UUID(int=0xBEEF)
    for api_key, version in ((68, 1), (3, 12)):
        body = _naming(load_request_schema(api_key, version), "orders", new)
        if api_key == 68:
            body = dataclasses.replace(body, subscribed_topic_names=("orders",))
        frame = _frame(api_key, version, 1, body)
        assert _check(access, frame) is None, api_key


@pytest.mark.parametrize(
    ("name", "pattern", "refused"),
    [
        ("orders", 3, False),
        ("ord", 4, False),
        ("*", 3, True),
        (REGISTRY, 3, True),
        ("_zdict", 4, True),
        ("_", 4, True),
        ("__consumer_offsets", 3, True),
        ("__c", 4, True),
        ("orders", 2, True),  # MATCH: also the wildcard and prefixes
        (None, 1, True),
    ],
)
def test_acls_that_may_apply_to_a_protected_topic_are_refused(
    name: str | None, pattern: int, refused: bool
) -> None:
    access, _ = _access(admin="forward")
    cls = load_request_schema(31, 3)
    body = _naming(cls, "x", ORDERS_ID)
    filters = (
        dataclasses.replace(
            body.filters[0], resource_name_filter=name, pattern_type_filter=pattern
        ),
    )
    frame = request_frame(31, 3, 2, filters=filters)
    assert (_check(access, frame) is not None) == refused


# -- Metadata ----------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [4, 12])
def test_metadata_naming_more_topics_than_the_bound_is_answered_without_brokers(
    version: int,
) -> None:
    access, _ = _access(max_metadata_topics=3)
    template = _naming(load_request_schema(3, version), "x", ORDERS_ID)
    entry = template.topics[0]

    def names(count: int) -> bytes:
        topics = tuple(dataclasses.replace(entry, name=f"t{i}") for i in range(count))
        return _frame(3, version, 8, template, topics=topics)

    assert _check(access, names(3)) is None
    with capture_logs() as logs:
        answer = _check(access, names(4))
    assert answer is not None
    _, body = read_response(3, version, answer[4:])
    assert body.brokers == () and body.topics == ()
    assert "ZDICT_PROXY__MAX_METADATA_TOPICS (3)" in logs[0]["detail"]
    every = _frame(3, version, 9, template, topics=None)
    assert _check(access, every) is None, "every topic: none named"


def test_metadata_naming_a_protected_topic_is_refused_so_nothing_auto_creates_it() -> None:
    access, _ = _access()
    body = _naming(load_request_schema(3, 4), REGISTRY, REGISTRY_ID)
    frame = request_frame(3, 4, 1, topics=body.topics, allow_auto_topic_creation=True)
    answer = _check(access, frame)
    assert answer is not None
    _, response = read_response(3, 4, answer[4:])
    assert [(t.name, t.error_code) for t in response.topics] == [
        (REGISTRY, ErrorCode.topic_authorization_failed)
    ]


# -- through a connection ----------------------------------------------------------------------


def test_a_refused_request_is_answered_in_order_and_nothing_of_it_forwarded() -> None:
    list_groups = request_frame(16, 4, 1, states_filter=())
    delete = _frame(21, 2, 2, _naming(load_request_schema(21, 2), "orders", ORDERS_ID))

    def script(frame: bytes) -> bytes | None:
        answer_class = load_response_schema(16, 4)
        return encode_response(int.from_bytes(frame[4:8], "big"), filled(answer_class))

    async def main() -> None:
        async with running(script) as (listeners, upstream, _registry):
            reader, writer = await asyncio.open_connection(*_bootstrap(listeners))
            writer.write(list_groups + delete)
            await writer.drain()
            first, second = await _read_frame(reader), await _read_frame(reader)
            writer.close()
            correlations = [int.from_bytes(f[:4], "big") for f in (first, second)]
            assert correlations == [1, 2], "in request order"
            _, body = read_response(21, 2, second)
            assert _error_codes(body) == [ErrorCode.cluster_authorization_failed]
            assert [int.from_bytes(f[:2], "big") for f in upstream.frames] == [16]

    asyncio.run(main())


def test_mutated_requests_are_answered_forwarded_or_refused_as_malformed() -> None:
    """Every request kio knows, naming the registry or an ordinary topic, mutated (fixed seed):
    the access check answers, forwards, or refuses it as malformed (its connection closed);
    it never fails otherwise."""
    rng = random.Random(37)
    seeds = []
    for api_key, version in _request_versions():
        served = served_versions(api_key)
        if served is None or not served[0] <= version <= served[1] or api_key in (0, 17, 36):
            continue
        cls = load_request_schema(api_key, version)
        for name, topic_id in ((REGISTRY, REGISTRY_ID), ("orders", ORDERS_ID)):
            seeds.append(_frame(api_key, version, 1, _naming(cls, name, topic_id))[4:])
    checks = [_access()[0], _access(admin="forward")[0]]
    outcomes = {"answered": 0, "forwarded": 0, "malformed": 0}
    for _ in range(5000):
        frame = bytearray(rng.choice(seeds))
        for _mutation in range(rng.randint(1, 3)):
            at = rng.randrange(8, len(frame)) if len(frame) > 8 else len(frame)
            kind = rng.randrange(3)
            if kind == 0 and at < len(frame):
                frame[at] = rng.randrange(256)
            elif kind == 1:
                del frame[at:]
            else:
                frame[at:at] = rng.randbytes(rng.randint(1, 8))
        body = bytes(frame)
        api_key, version = int.from_bytes(body[:2], "big"), int.from_bytes(body[2:4], "big")
        for access in checks:
            try:
                header = read_request_header(body, request_header_version(api_key, version))
                answer = access.refusal(body, header)
            except ProtocolError:
                outcomes["malformed"] += 1
            else:
                outcomes["answered" if answer is not None else "forwarded"] += 1
    assert min(outcomes.values()) > 100, outcomes


def test_classic_groups_subscribing_to_or_assigning_a_protected_topic_are_refused() -> None:
    access, _ = _access()
    join = _fields_of(11, 9)
    (protocol,) = join["protocols"]
    sync = _fields_of(14, 5)
    (assigned,) = sync["assignments"]
    for name, expected in ((REGISTRY, False), ("__consumer_offsets", False), ("orders", True)):
        subscribed = dataclasses.replace(protocol, metadata=subscription(name))
        frame = request_frame(
            11, 9, 5, **join | {"protocol_type": "consumer"} | {"protocols": (subscribed,)}
        )
        answer = _check(access, frame)
        assert (answer is None) == expected, name
        if answer is not None:
            _, body = read_response(11, 9, answer[4:])
            assert body.error_code == ErrorCode.topic_authorization_failed
        given = dataclasses.replace(assigned, assignment=assignment(name))
        for protocol_type in ("consumer", None):
            frame = request_frame(
                14, 5, 6, **sync | {"protocol_type": protocol_type, "assignments": (given,)}
            )
            assert (_check(access, frame) is None) == expected, (name, protocol_type)
    connect = dataclasses.replace(protocol, metadata=subscription(REGISTRY))
    frame = request_frame(11, 9, 7, **join | {"protocol_type": "connect", "protocols": (connect,)})
    assert _check(access, frame) is None, "another protocol's bytes are not read"


def test_the_registry_index_is_protected_as_the_registry_is() -> None:
    view = TopicView(REGISTRY)
    assert view.protected(REGISTRY + INDEX_SUFFIX) and view.refused(REGISTRY + INDEX_SUFFIX)
    assert not view.protected("orders" + INDEX_SUFFIX)
    assert not TopicView(REGISTRY, show_internal=True).refused(REGISTRY + INDEX_SUFFIX)
