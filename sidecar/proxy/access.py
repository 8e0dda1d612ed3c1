"""What a request may do through the proxy, decided before it is forwarded.

Every local client reaches the cluster as the proxy's own principal, so the proxy decides what
the cluster's ACLs no longer can. A request it refuses is not forwarded: the proxy answers it
with the API's own response (`refusals`), and logs one `request_refused_by_proxy` line per API
and reason per `LOG_INTERVAL` seconds (kinds are the proxy's names, never a client string),
counted in `zdict_proxy_refused_requests_total{api, reason}`.

* **Admin APIs** (`versions.admin_apis()`: every API kio knows but what producers and consumers
  need) are refused with CLUSTER_AUTHORIZATION_FAILED unless `proxy.admin_apis=forward`, and left
  out of the ApiVersions answer, so a client that reads it (every real client) fails the call
  itself ("not supported by the broker") without sending it.
* **Protected topics** (`topics.TopicView.protected`: internal topics and the registry topic):
  a request naming one, by name, by id or as a config or ACL resource, is refused with
  TOPIC_AUTHORIZATION_FAILED, whatever the API and `proxy.admin_apis` say. The requests
  that only read (`READS`) pass with `proxy.show_internal_topics`. A topic id is protected
  once a listing named it so: the proxy's own Metadata at start (`known_topics`) and every
  Metadata and DescribeTopicPartitions answer that passes. An id no listing named is refused
  with UNKNOWN_TOPIC_ID where records are read or changed (Fetch, the admin APIs): the client
  looks the id up again (Metadata, which passes and teaches the proxy its name) and retries.
  In the group APIs such an id passes: no record is read or changed through it there.
* **Metadata** naming more than `proxy.max_metadata_topics` topics is answered with no broker
  and no topic (and POLICY_VIOLATION where the version has a top-level error), read no further.

Topic names, ids and resources are found in the request by its kio schema: a field of kio's
`TopicName` type, a uuid field `topic_id`, a config resource (`resource_type` 2, a topic) or an
ACL resource or filter of a topic or of any type (`ACL_APIS`). JoinGroup's subscriptions and
SyncGroup's assignments are read too (`group_protocol`): a classic group subscribing to or
assigning a protected topic is refused; what responses show of protected topics is stripped
(`hiding`). `UNCHECKED` lists the fields that name topics otherwise, and why they need no check.
"""

from __future__ import annotations

import dataclasses
import functools
import struct
import typing
import uuid
from collections.abc import Callable, Iterator
from typing import Any, Final, Literal

from kio.index import load_request_schema
from kio.schema.errors import ErrorCode
from kio.schema.types import TopicName
from kio.serial import entity_reader
from kio.serial.errors import SerialError

from sidecar.errors import ProtocolError
from sidecar.logs import get_logger
from sidecar.proxy import group_protocol
from sidecar.proxy.bounded import check
from sidecar.proxy.frames import RequestHeader
from sidecar.proxy.metrics import ForwardMetrics
from sidecar.proxy.refusals import EntryKey, answer, strip_none
from sidecar.proxy.throttle import Throttle
from sidecar.proxy.topics import TopicView
from sidecar.proxy.versions import (
    DESCRIBE_ACLS,
    FETCH,
    JOIN_GROUP,
    METADATA,
    PRODUCE,
    SYNC_GROUP,
    admin_apis,
    api_name,
)
from sidecar.wire.varint import read_uvarint

log = get_logger(__name__)

#: `proxy.admin_apis`.
AdminApis = Literal["refuse", "forward"]
#: Seconds between two log lines of one API and reason.
LOG_INTERVAL: Final = 10.0
#: The requests that only read a topic: they may name protected topics with
#: `proxy.show_internal_topics`.
READS: Final = frozenset(
    {
        FETCH,
        2,  # ListOffsets
        METADATA,
        9,  # OffsetFetch
        23,  # OffsetForLeaderEpoch
        32,  # DescribeConfigs
        35,  # DescribeLogDirs
        46,  # ListPartitionReassignments
        61,  # DescribeProducers
        75,  # DescribeTopicPartitions
    }
)
#: The APIs whose resources are ACL patterns (CreateAcls, DeleteAcls); DescribeAcls only reads
#: the ACLs themselves, not a topic, and is not checked.
ACL_APIS: Final = frozenset({30, 31})
#: Config resource type and ACL resource types of a topic (`ANY` matches every type).
_CONFIG_TOPIC: Final = 2
_ACL_ANY: Final = 1
_ACL_TOPIC: Final = 2
#: ACL pattern types: a literal name, or a prefix of names.
_LITERAL: Final = 3
_PREFIXED: Final = 4
_INDEXES: Final = "indexes into the subtopology's own topic lists (checked)"
_SUBTOPOLOGIES: Final = "StreamsGroupHeartbeatRequest.topology.subtopologies"
#: Request fields (paths from the request class) that could name topics but are not checked,
#: and why.
UNCHECKED: Final[dict[str, str]] = {
    "ConsumerGroupHeartbeatRequest.subscribed_topic_regex": "the broker resolves it; what it "
    "assigns is stripped from the response (`hiding`) and read by Fetch, which refuses "
    "protected and unknown ids",
    "DescribeAclsRequest.resource_name_filter": "describes ACLs, reads no topic",
    f"{_SUBTOPOLOGIES}.source_topic_regex": "the broker resolves it; what it assigns is read by "
    "Fetch (see above)",
    f"{_SUBTOPOLOGIES}.copartition_groups.source_topics": _INDEXES,
    f"{_SUBTOPOLOGIES}.copartition_groups.source_topic_regex": _INDEXES,
    f"{_SUBTOPOLOGIES}.copartition_groups.repartition_source_topics": _INDEXES,
}
_INT32: Final = struct.Struct(">i")
#: The fewest bytes a topic of a Metadata request takes: an empty name (and its tagged fields).
_FEWEST_METADATA_TOPIC_BYTES: Final = 2


class RequestAccess:
    """Decides, per request, whether it is forwarded or answered with an error (see module)."""

    def __init__(
        self,
        topics: TopicView,
        metrics: ForwardMetrics,
        *,
        admin: AdminApis = "refuse",
        max_metadata_topics: int = 1000,
        log_interval: float = LOG_INTERVAL,
    ) -> None:
        self.topics = topics
        self.metrics = metrics
        self.admin = admin
        self.max_metadata_topics = max_metadata_topics
        #: APIs refused whatever they name; left out of ApiVersions.
        self.refused_apis = admin_apis() if admin == "refuse" else frozenset()
        self._log_interval = log_interval
        self._throttles: dict[tuple[int, str], Throttle] = {}

    def refusal(self, frame: bytes, header: RequestHeader) -> bytes | None:
        """The answer to give instead of forwarding `frame` (its size prefix excluded, its
        header read as `header`); None: forward it.

        Raises:
            ProtocolError: the request does not parse (its connection is closed).
        """
        api_key = header.api_key
        if api_key == PRODUCE:
            return None  # its topics are checked by its allow-list (`produce`)
        if api_key in self.refused_apis:
            # Parsed, so that each of its entries is answered (a client looks for its own).
            return self._refuse(
                header,
                "admin_api",
                ErrorCode.cluster_authorization_failed,
                _ADMIN_ADVICE,
                request=parse_request(api_key, header.version, frame, header.size),
            )
        if api_key == METADATA:
            count = _metadata_topic_count(frame, header)
            if count > self.max_metadata_topics:
                return self._refuse(
                    header,
                    "too_many_topics",
                    ErrorCode.policy_violation,
                    f"a Metadata request names {count} topics, more than "
                    f"ZDICT_PROXY__MAX_METADATA_TOPICS ({self.max_metadata_topics})",
                )
        if not names_topics(api_key, header.version):
            return None
        request = parse_request(api_key, header.version, frame, header.size)
        return self._check_topics(header, request)

    def _check_topics(self, header: RequestHeader, request: Any) -> bytes | None:
        api_key = header.api_key
        reads = self.topics.show_internal and api_key in READS
        strict = api_key == FETCH or api_key in admin_apis()
        refused: dict[tuple[str | None, uuid.UUID | None], ErrorCode] = {}
        for key in topic_keys(api_key, request):
            error = self._verdict(key, reads=reads, strict=strict)
            if error is not None:
                refused[(key.name, key.topic_id)] = error
        if not refused:
            return None
        protected = ErrorCode.topic_authorization_failed in refused.values()
        error = ErrorCode.topic_authorization_failed if protected else ErrorCode.unknown_topic_id
        beside = _BESIDE.get(api_key, error)
        return self._refuse(
            header,
            "protected_topic" if protected else "unknown_topic_id",
            error,
            _PROTECTED_ADVICE if protected else _UNKNOWN_ADVICE,
            request=request,
            entry_error=lambda key: refused.get((key.name, key.topic_id), beside),
        )

    def _verdict(self, key: Named, *, reads: bool, strict: bool) -> ErrorCode | None:
        """The error a request naming `key` gets (None: it may)."""
        if key.acl_pattern is not None:
            if self._acl_covers_protected(key.name, key.acl_pattern):
                return ErrorCode.topic_authorization_failed
            return None
        named = key.name is not None and self.topics.protected(key.name)
        if named or (key.topic_id is not None and self.topics.protected_id(key.topic_id)):
            return None if reads else ErrorCode.topic_authorization_failed
        if strict and key.topic_id is not None and not self.topics.known_id(key.topic_id):
            return ErrorCode.unknown_topic_id
        return None

    def _acl_covers_protected(self, name: str | None, pattern: int) -> bool:
        """Whether an ACL (or ACL filter) on `name` of pattern type `pattern` may apply to a
        protected topic: only a literal name or a prefix that covers none of them may not."""
        if name is None:
            return True
        if pattern == _LITERAL:
            return name == "*" or self.topics.protected(name)
        if pattern == _PREFIXED:
            registry = self.topics.registry_topic or ""
            return (
                registry.startswith(name)
                or name.startswith(_INTERNAL)
                or _INTERNAL.startswith(name)
            )
        return True  # ANY and MATCH filters: any literal, wildcard or prefix

    def _refuse(
        self,
        header: RequestHeader,
        reason: str,
        error: ErrorCode,
        advice: str,
        *,
        request: Any = None,
        entry_error: Callable[[EntryKey], ErrorCode] | None = None,
    ) -> bytes:
        api = api_name(header.api_key)
        self.metrics.request_refused(header.api_key, reason)
        throttle = self._throttles.get((header.api_key, reason))
        if throttle is None:
            throttle = self._throttles[(header.api_key, reason)] = Throttle(self._log_interval)
        held = throttle.admit()
        if held is not None:
            log.warning(
                "request_refused_by_proxy",
                api=api,
                reason=reason,
                error=error.name.upper(),
                client_id=header.client_id,
                repeated=held or None,
                detail=advice,
            )
        return answer(
            header.api_key,
            header.version,
            header.correlation_id,
            error,
            f"refused by the zdict proxy: {advice}",
            request=request,
            entry_error=entry_error,
        )


_INTERNAL: Final = "__"
_ADMIN_ADVICE: Final = (
    "the proxy forwards what producers and consumers need; admin APIs act as the proxy's "
    "principal: set ZDICT_PROXY__ADMIN_APIS=forward to pass them, or reach the cluster directly"
)
_PROTECTED_ADVICE: Final = (
    "internal topics and the dictionary registry's topic are never read or changed through the "
    "proxy (reads: ZDICT_PROXY__SHOW_INTERNAL_TOPICS)"
)
_UNKNOWN_ADVICE: Final = (
    "a topic id no Metadata answer through the proxy has named: look the topic up again"
)
#: The error of the other partitions of a refused request, where the refused ones' would
#: mislead: a Fetch's others are retried after a metadata refresh, as after a leader change.
_BESIDE: Final[dict[int, ErrorCode]] = {FETCH: ErrorCode.not_leader_or_follower}


@dataclasses.dataclass(frozen=True, slots=True)
class Named:
    """A topic a request names: by name, by id, or as a resource (an ACL's: with its pattern
    type)."""

    name: str | None = None
    topic_id: uuid.UUID | None = None
    acl_pattern: int | None = None


def parse_request(api_key: int, version: int, frame: bytes, offset: int) -> Any:
    """The kio payload of a request frame (size prefix excluded) whose body starts at `offset`.

    Raises:
        ProtocolError: the bytes do not parse as that request.
    """
    try:
        schema = load_request_schema(api_key, version)
        # kio allocates for declared counts before checking them: bounds first.
        check(schema, frame, offset)
        body, _ = entity_reader(schema)(frame, offset)
    except (SerialError, ValueError, KeyError, TypeError, OverflowError, IndexError) as exc:
        raise ProtocolError(
            f"{api_name(api_key)} v{version} request does not parse: {type(exc).__name__}: {exc}"
        ) from None
    # Bytes after its end are left as a broker leaves them: librdkafka's Metadata v13 has 3.
    return body


def topic_keys(api_key: int, request: Any) -> Iterator[Named]:
    """Every topic (name, id, config or ACL resource) the parsed `request` names, for entries
    answered per topic keyed as `refusals` keys them."""
    yield from _walk(request, acl=api_key in ACL_APIS)
    if api_key == JOIN_GROUP:
        for protocol in request.protocols:
            yield from _group_topics("subscription", protocol.metadata, request.protocol_type)
    elif api_key == SYNC_GROUP:
        protocol_type = getattr(request, "protocol_type", None)
        for assignment in request.assignments:
            yield from _group_topics("assignment", assignment.assignment, protocol_type)


def _group_topics(
    kind: group_protocol.Kind, data: bytes, protocol_type: str | None
) -> Iterator[Named]:
    """The topics of a classic group's consumer protocol bytes (none: another protocol's)."""
    message = group_protocol.read(kind, data, protocol_type)
    if message is not None:
        for name in group_protocol.topics(message):
            yield Named(name=name)


def _walk(entity: Any, *, acl: bool) -> Iterator[Named]:
    plan = topic_plan(type(entity))
    if plan.resource:
        yield from _resource(entity, acl=acl)
    name: str | None = None
    topic_id: uuid.UUID | None = None
    for field_name, kind in plan.fields:
        value = getattr(entity, field_name)
        if value is None:
            continue
        if kind == NAME:
            name = str(value)
        elif kind == NAMES:
            for one in value:
                yield Named(name=str(one))
        elif kind == ID:
            topic_id = value
        elif kind == ENTITY:
            yield from _walk(value, acl=acl)
        else:
            for item in value:
                yield from _walk(item, acl=acl)
    if name is not None or topic_id is not None:
        yield Named(name=name, topic_id=topic_id if topic_id is not None and topic_id.int else None)


def _resource(entity: Any, *, acl: bool) -> Iterator[Named]:
    """The topic a config resource or an ACL (filter) names."""
    if acl:
        kind = int(_first(entity, "resource_type", "resource_type_filter"))
        if kind in (_ACL_ANY, _ACL_TOPIC):
            name = _first(entity, "resource_name", "resource_name_filter")
            pattern = int(_first(entity, "resource_pattern_type", "pattern_type_filter"))
            yield Named(name=name, acl_pattern=pattern)
    elif int(entity.resource_type) == _CONFIG_TOPIC:
        yield Named(name=str(entity.resource_name))


def _first(entity: Any, *names: str) -> Any:
    for name in names:
        if hasattr(entity, name):
            return getattr(entity, name)
    raise AttributeError(names[0])


NAME: Final = "name"
NAMES: Final = "names"
ID: Final = "id"
ENTITY: Final = "entity"
ENTITIES: Final = "entities"


@dataclasses.dataclass(frozen=True, slots=True)
class TopicPlan:
    """The fields of a kio class that name topics or lead to some that do."""

    fields: tuple[tuple[str, str], ...]
    #: Whether the class is a config resource or an ACL (filter).
    resource: bool


def topic_plan(cls: type[Any]) -> TopicPlan:
    """The plan of kio class `cls`, made once (kio's classes are a fixed set)."""
    plan = _PLANS.get(cls)
    if plan is None:
        plan = _PLANS[cls] = _make_plan(cls)
    return plan


def _make_plan(cls: type[Any]) -> TopicPlan:
    hints = typing.get_type_hints(cls)
    fields: list[tuple[str, str]] = []
    for field in dataclasses.fields(cls):
        hint = strip_none(hints[field.name])
        array = typing.get_origin(hint) is tuple
        inner = strip_none(typing.get_args(hint)[0]) if array else hint
        if inner is TopicName:
            fields.append((field.name, NAMES if array else NAME))
        elif inner is uuid.UUID and field.name == "topic_id" and not array:
            fields.append((field.name, ID))
        elif dataclasses.is_dataclass(inner) and _leads_to_topics(typing.cast(type[Any], inner)):
            fields.append((field.name, ENTITIES if array else ENTITY))
    return TopicPlan(tuple(fields), _is_resource(cls))


_PLANS: dict[type[Any], TopicPlan] = {}


def _is_resource(cls: type[Any]) -> bool:
    names = {f.name for f in dataclasses.fields(cls)}
    return bool(names & {"resource_type", "resource_type_filter"}) and bool(
        names & {"resource_name", "resource_name_filter"}
    )


def _leads_to_topics(cls: type[Any]) -> bool:
    plan = topic_plan(cls)
    return bool(plan.fields) or plan.resource


@functools.cache
def names_topics(api_key: int, version: int) -> bool:
    """Whether a request of `api_key` in `version` can name a topic (and is parsed)."""
    if api_key == DESCRIBE_ACLS:
        return False
    if api_key in (JOIN_GROUP, SYNC_GROUP):
        return True  # their consumer protocol bytes name topics
    return _leads_to_topics(load_request_schema(api_key, version))


def _metadata_topic_count(frame: bytes, header: RequestHeader) -> int:
    """The number of topics a Metadata request names (0 for every topic), read without the
    rest of the request: its first field is the topic array.

    Raises:
        ProtocolError: the frame ends before it.
    """
    offset = header.size
    if header.version >= 9:  # flexible: a compact array, count + 1, 0 for null
        count, offset = read_uvarint(frame, offset, len(frame))
        count -= 1
    elif len(frame) < offset + _INT32.size:
        raise ProtocolError("a Metadata request ends before its topic array")
    else:
        count, offset = int(_INT32.unpack_from(frame, offset)[0]), offset + _INT32.size
    if count * _FEWEST_METADATA_TOPIC_BYTES > len(frame) - offset:
        raise ProtocolError(
            f"a Metadata request declares {count} topics, more than its "
            f"{len(frame) - offset} bytes left hold"
        )
    return max(count, 0)
