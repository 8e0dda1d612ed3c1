"""What the proxy lets clients use: ApiVersions filtered to the versions kio parses,
the APIs that name brokers the proxy does not rewrite removed; and a check, over every response
kio knows, that no served response names a broker the proxy leaves as it is."""

from __future__ import annotations

import dataclasses
import sys
import typing
from typing import Any

import pytest
from kio.index import load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map

from sidecar.proxy.filters.api_versions import ServedVersions, filter_api_versions
from sidecar.proxy.filters.produce import ProduceFilter
from sidecar.proxy.node_addresses import REWRITTEN_FROM
from sidecar.proxy.versions import (
    API_VERSIONS,
    FETCH,
    METADATA,
    PRODUCE,
    REMOVED,
    api_name,
    kio_versions,
    request_header_version,
    served_versions,
)
from tests.unit.forward_messages import filled

#: The versions the proxy serves: kio's, narrowed by the Produce filter's.
SERVED = ServedVersions(ProduceFilter(None, 0.02).request_keys)

#: Responses with host and port fields that are not brokers: Kafka Streams application
#: endpoints (KIP-1071), which clients publish for each other.
NOT_BROKERS = {88: "StreamsGroupHeartbeat", 89: "StreamsGroupDescribe"}


def _upstream_answer(version: int, entries: dict[int, tuple[int, int]]) -> Any:
    cls = load_response_schema(API_VERSIONS, version)
    entry = sys.modules[cls.__module__].ApiVersion
    return filled(
        cls,
        api_keys=tuple(
            entry(api_key=k, min_version=low, max_version=high)
            for k, (low, high) in entries.items()
        ),
    )


def test_api_versions_are_limited_to_kio_and_the_removed_apis_left_out() -> None:
    upstream = {
        PRODUCE: (3, 13),
        FETCH: (4, 18),
        METADATA: (0, 99),
        API_VERSIONS: (0, 5),
        78: (1, 2),  # ShareFetch
        55: (0, 2),  # DescribeQuorum
        9999: (0, 0),  # an API kio does not know
    }
    got = filter_api_versions(_upstream_answer(4, upstream), False, served=SERVED.served)
    listed = {e.api_key: (e.min_version, e.max_version) for e in got.api_keys}
    assert listed == {
        PRODUCE: (3, 12),  # v13 names topics by id; the allow-list goes by name
        FETCH: (4, 18),  # v16+ NodeEndpoints rewritten like Produce v10+
        METADATA: (0, 13),
        API_VERSIONS: (0, 4),
    }
    assert got.error_code == ErrorCode.none
    assert dataclasses.replace(got, api_keys=()) == dataclasses.replace(
        _upstream_answer(4, upstream), api_keys=()
    ), "features, throttle time and the rest as upstream sent them"


def test_an_api_versions_answered_in_v0_carries_unsupported_version() -> None:
    got = filter_api_versions(
        _upstream_answer(0, {API_VERSIONS: (0, 5)}), True, served=SERVED.served
    )
    assert got.error_code == ErrorCode.unsupported_version
    assert [(e.api_key, e.min_version, e.max_version) for e in got.api_keys] == [(18, 0, 4)]


def test_a_range_left_empty_by_the_intersection_is_not_listed() -> None:
    got = filter_api_versions(_upstream_answer(3, {FETCH: (19, 20)}), False, served=SERVED.served)
    assert got.api_keys == (), "Fetch v19+ is not known to kio"


@pytest.mark.parametrize(
    ("api_key", "version", "accepted"),
    [
        (0, 12, True),
        (0, 13, False),
        (1, 15, True),
        (1, 18, True),
        (1, 19, False),
        (3, 13, True),
        (3, 14, False),
        (78, 1, False),
        (55, 0, False),
        (9999, 0, False),
        (-1, 0, False),
    ],
)
def test_requests_are_forwarded_for_the_versions_listed_only(
    api_key: int, version: int, accepted: bool
) -> None:
    assert SERVED.accepts(api_key, version) is accepted


def test_flexible_versions_take_request_header_v2() -> None:
    assert request_header_version(METADATA, 8) == 1
    assert request_header_version(METADATA, 9) == 2
    assert request_header_version(API_VERSIONS, 3) == 2


def test_api_names_are_kios_and_bounded() -> None:
    assert api_name(10) == "FindCoordinator"
    assert api_name(60) == "DescribeCluster"
    assert api_name(31000) == "unknown"


def _named_addresses(cls: type[Any], seen: set[type[Any]]) -> bool:
    """Whether a kio entity, or one nested in it, has both a host and a port field."""
    if cls in seen:
        return False
    seen.add(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    if {"host", "port"} <= names:
        return True
    for hint in typing.get_type_hints(cls).values():
        for part in (hint, *typing.get_args(hint)):
            if dataclasses.is_dataclass(part) and _named_addresses(part, seen):  # type: ignore[arg-type]
                return True
    return False


def test_every_served_response_naming_hosts_and_ports_is_rewritten() -> None:
    """Read from kio's classes, generated from Kafka's message definitions: a new version that
    names brokers shows up here before a client can use it through the proxy."""
    leaks = []
    for api_key in sorted(api_key_map):
        served = SERVED.served(api_key)
        if served is None or api_key in NOT_BROKERS:
            continue
        for version in range(served[0], served[1] + 1):
            if not _named_addresses(load_response_schema(api_key, version), set()):
                continue
            first = REWRITTEN_FROM.get(api_key)
            if first is None or version < first:
                leaks.append(f"{api_name(api_key)} v{version}")
    assert leaks == []
    assert all(served_versions(k) is None for k in REMOVED)
    assert kio_versions(FETCH) is not None and kio_versions(FETCH)[1] >= 16  # type: ignore[index]
