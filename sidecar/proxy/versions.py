"""Which APIs and versions the forwarding proxy lets clients use, and the ApiVersions answer
filtered to them.

An API version is served when kio (the protocol codecs, generated from Kafka's JSON message
definitions) knows its request and response: the proxy then knows every field the response can
carry, so none names a broker the proxy does not rewrite. Upstream's own range is intersected
with that, and capped where the proxy's rewriting stops (`CAPPED`). Removed (`REMOVED`): the
APIs whose responses name brokers or carry records the proxy does not rewrite yet, found by
reading every response definition of Kafka 4.4 for host and port fields. Fetch responses from
v16 on and Produce responses from v10 on name brokers (`NodeEndpoints`, KIP-951); the proxy
parses and rewrites them (`addresses`, `fetch`).

Of what is served, the APIs producers and consumers need (`CLIENT_APIS`) are always forwarded;
the others (`admin_apis`: every other API kio knows, so an API new to kio is one of them) only
with `proxy.admin_apis=forward` (`access`), and left out of the ApiVersions answer otherwise.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Final

from kio.index import load_request_schema
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.static.constants import EntityType

PRODUCE: Final = 0
FETCH: Final = 1
METADATA: Final = 3
FIND_COORDINATOR: Final = 10
API_VERSIONS: Final = 18
DESCRIBE_CLUSTER: Final = 60
#: API key -> why it is never listed nor forwarded.
REMOVED: Final[dict[int, str]] = {
    52: "Vote: names controllers (NodeEndpoints)",
    53: "BeginQuorumEpoch: names controllers (NodeEndpoints)",
    54: "EndQuorumEpoch: names controllers (NodeEndpoints)",
    55: "DescribeQuorum: names controllers (Listeners)",
    59: "FetchSnapshot: names controllers (NodeEndpoints)",
    78: "ShareFetch: carries records and names brokers (NodeEndpoints)",
    79: "ShareAcknowledge: names brokers (NodeEndpoints)",
    82: "UpdateRaftVoter: names the controller leader (CurrentLeader)",
}
#: API key -> name: what producers, consumers, consumer groups and transactions use, the
#: SASL exchange (answered by the proxy, `client_sasl`) and read-only descriptions; forwarded
#: whatever `proxy.admin_apis` says. OffsetForLeaderEpoch: consumers check their position
#: after a leader change (KIP-320). Telemetry: Java clients push their metrics (KIP-714).
CLIENT_APIS: Final[dict[int, str]] = {
    PRODUCE: "Produce",
    FETCH: "Fetch",
    2: "ListOffsets",
    METADATA: "Metadata",
    8: "OffsetCommit",
    9: "OffsetFetch",
    FIND_COORDINATOR: "FindCoordinator",
    11: "JoinGroup",
    12: "Heartbeat",
    13: "LeaveGroup",
    14: "SyncGroup",
    15: "DescribeGroups",
    16: "ListGroups",
    17: "SaslHandshake",
    API_VERSIONS: "ApiVersions",
    22: "InitProducerId",
    23: "OffsetForLeaderEpoch",
    24: "AddPartitionsToTxn",
    25: "AddOffsetsToTxn",
    26: "EndTxn",
    28: "TxnOffsetCommit",
    32: "DescribeConfigs",
    36: "SaslAuthenticate",
    DESCRIBE_CLUSTER: "DescribeCluster",
    61: "DescribeProducers",
    65: "DescribeTransactions",
    66: "ListTransactions",
    68: "ConsumerGroupHeartbeat",
    69: "ConsumerGroupDescribe",
    71: "GetTelemetrySubscriptions",
    72: "PushTelemetry",
    75: "DescribeTopicPartitions",
}
#: API key -> the highest version served whatever kio and upstream know (see module).
CAPPED: Final[dict[int, int]] = {
    # v13 names topics by id: the allow-list and namespaces go by name (`produce_request`).
    PRODUCE: 12,
}


@functools.cache
def kio_versions(api_key: int) -> tuple[int, int] | None:
    """The lowest and highest version of `api_key` whose request and response kio knows."""
    name = api_key_map.get(api_key)
    if name is None:
        return None
    known = [
        version
        for version, entities in schema_name_map[name].items()
        if EntityType.request in entities and EntityType.response in entities
    ]
    return (min(known), max(known)) if known else None


@functools.cache
def served_versions(api_key: int) -> tuple[int, int] | None:
    """The versions of `api_key` clients may use through the proxy (None: not served)."""
    known = kio_versions(api_key)
    if known is None or api_key in REMOVED:
        return None
    low, high = known
    high = min(high, CAPPED.get(api_key, high))
    return (low, high) if low <= high else None


@functools.cache
def admin_apis() -> frozenset[int]:
    """The APIs served only with `proxy.admin_apis=forward`: every API kio knows that is
    neither a client API nor removed."""
    return frozenset(api_key_map) - frozenset(CLIENT_APIS) - frozenset(REMOVED)


def accepts(api_key: int, version: int) -> bool:
    """Whether a request of `api_key` in `version` is forwarded."""
    served = served_versions(api_key)
    return served is not None and served[0] <= version <= served[1]


@functools.cache
def request_header_version(api_key: int, version: int) -> int:
    """The request header version (1, or 2 for the flexible versions) of a served version."""
    header_class = load_request_schema(api_key, version).__header_schema__
    return 2 if ".v2." in header_class.__module__ else 1


def api_name(api_key: int) -> str:
    """`Metadata`, `FindCoordinator`, ... from kio's index; `unknown` for the others (a bounded
    metrics label whatever a client sends)."""
    name = api_key_map.get(api_key)
    if name is None:
        return "unknown"
    return "".join(part.capitalize() for part in name.split("_"))


def filter_api_versions(body: Any, unsupported: bool, refused: frozenset[int] = frozenset()) -> Any:
    """Upstream's ApiVersions answer (a kio payload) limited to what the proxy serves, the APIs
    of `refused` left out; with `unsupported`, carrying UNSUPPORTED_VERSION (the client asked a
    version above ours)."""
    entries = []
    for entry in body.api_keys:
        served = served_versions(entry.api_key)
        if served is None or entry.api_key in refused:
            continue
        low = max(entry.min_version, served[0])
        high = min(entry.max_version, served[1])
        if low <= high:
            entries.append(dataclasses.replace(entry, min_version=low, max_version=high))
    error = ErrorCode.unsupported_version if unsupported else body.error_code
    return dataclasses.replace(body, api_keys=tuple(entries), error_code=error)
