"""The broker addresses of the responses that name brokers (Metadata, FindCoordinator,
DescribeCluster, and Produce from v10 on and Fetch from v16 on, whose `NodeEndpoints` name new
leaders): which upstream nodes a parsed response names, and the response with each one's
address replaced by its local listener's (the filter is `filters.broker_addresses`).

Only host and port change: everything else of a response, its node ids, racks, errors and
tagged fields kio knows, is written back as it came.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Final

from kio.schema.errors import ErrorCode

from sidecar.proxy.addresses import Address
from sidecar.proxy.versions import DESCRIBE_CLUSTER, FETCH, FIND_COORDINATOR, METADATA, PRODUCE

#: API key -> the first version whose response names brokers.
REWRITTEN_FROM: Final[dict[int, int]] = {
    METADATA: 0,
    FIND_COORDINATOR: 0,
    DESCRIBE_CLUSTER: 0,
    PRODUCE: 10,
    FETCH: 16,
}
#: DescribeCluster's endpoint type naming brokers (2 names controllers, not served).
_BROKERS_ENDPOINT_TYPE: Final = 1


def upstream_nodes(api_key: int, body: Any) -> dict[int, Address]:
    """Node id -> upstream address of every broker a parsed response names."""
    return {node_id: Address(host, port) for node_id, host, port in _named(api_key, body)}


def rewrite(api_key: int, body: Any, local: Mapping[int, Address | None]) -> Any:
    """`body` with the address of each broker it names replaced by `local[node id]`; a broker
    without a local address is left out (a coordinator becomes COORDINATOR_NOT_AVAILABLE,
    which clients retry)."""
    if api_key in (METADATA, DESCRIBE_CLUSTER):
        if not _names_brokers(body):
            return dataclasses.replace(body, brokers=())
        return dataclasses.replace(body, brokers=_moved(body.brokers, local))
    if api_key in (PRODUCE, FETCH):
        return dataclasses.replace(body, node_endpoints=_moved(body.node_endpoints, local))
    if api_key == FIND_COORDINATOR:
        if hasattr(body, "coordinators"):
            return dataclasses.replace(
                body, coordinators=tuple(_coordinator(c, local) for c in body.coordinators)
            )
        return _coordinator(body, local)
    return body


def _names_brokers(body: Any) -> bool:
    return getattr(body, "endpoint_type", _BROKERS_ENDPOINT_TYPE) == _BROKERS_ENDPOINT_TYPE


def _named(api_key: int, body: Any) -> list[tuple[int, str, int]]:
    if api_key in (METADATA, DESCRIBE_CLUSTER):
        entries = body.brokers if _names_brokers(body) else ()
    elif api_key in (PRODUCE, FETCH):
        entries = body.node_endpoints
    elif api_key == FIND_COORDINATOR:
        entries = getattr(body, "coordinators", (body,))
        entries = tuple(e for e in entries if _is_found(e))
    else:
        entries = ()
    return [(_node_id(e), str(e.host), int(e.port)) for e in entries]


def _is_found(coordinator: Any) -> bool:
    return bool(coordinator.error_code == ErrorCode.none and coordinator.node_id >= 0)


def _moved(entries: tuple[Any, ...], local: Mapping[int, Address | None]) -> tuple[Any, ...]:
    moved = []
    for entry in entries:
        address = local.get(_node_id(entry))
        if address is not None:
            moved.append(dataclasses.replace(entry, host=address.host, port=address.port))
    return tuple(moved)


def _node_id(entry: Any) -> int:
    """The node id of a broker entry (DescribeCluster names it `broker_id`)."""
    node_id = getattr(entry, "node_id", None)
    return int(entry.broker_id if node_id is None else node_id)


def _coordinator(entry: Any, local: Mapping[int, Address | None]) -> Any:
    if not _is_found(entry):
        return entry
    address = local.get(int(entry.node_id))
    if address is None:
        return dataclasses.replace(
            entry,
            error_code=ErrorCode.coordinator_not_available,
            node_id=-1,
            host="",
            port=-1,
        )
    return dataclasses.replace(entry, host=address.host, port=address.port)
