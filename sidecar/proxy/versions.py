"""The Kafka APIs as the proxy knows them: their keys and names, their versions kio knows,
which of them the proxy may serve, and which only with `proxy.admin_apis=forward`.

An API version is served when kio (the protocol codecs, generated from Kafka's JSON message
definitions) knows its request and response: the proxy then knows every field the response can
carry, so none names a broker the proxy does not rewrite. A filter that reads every request
of an API narrows its range to what it reads (Produce: `produce_request`), and upstream's own
range is intersected with that in the ApiVersions answer (`filters.api_versions`).
Removed (`REMOVED`): the APIs whose responses name brokers or carry records the proxy does not
rewrite yet, found by reading every response definition of Kafka 4.4 for host and port fields.
Fetch responses from v16 on and Produce responses from v10 on name brokers (`NodeEndpoints`,
KIP-951); the proxy parses and rewrites them (`filters.broker_addresses`, `fetch`).

Of what is served, the APIs producers and consumers need (`CLIENT_APIS`) are always forwarded;
the others (`admin_apis`: every other API kio knows, so an API new to kio is one of them) only
with `proxy.admin_apis=forward` (`access`), and left out of the ApiVersions answer otherwise.
"""

from __future__ import annotations

import functools
from typing import Final

from kio.index import load_request_schema
from kio.schema.index import api_key_map, schema_name_map
from kio.static.constants import EntityType

#: The API keys the proxy names (Kafka's message definitions), declared here only.
PRODUCE: Final = 0
FETCH: Final = 1
METADATA: Final = 3
FIND_COORDINATOR: Final = 10
JOIN_GROUP: Final = 11
SYNC_GROUP: Final = 14
DESCRIBE_GROUPS: Final = 15
SASL_HANDSHAKE: Final = 17
API_VERSIONS: Final = 18
DESCRIBE_ACLS: Final = 29
DESCRIBE_LOG_DIRS: Final = 35
SASL_AUTHENTICATE: Final = 36
DESCRIBE_CLUSTER: Final = 60
DESCRIBE_TOPIC_PARTITIONS: Final = 75
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
    JOIN_GROUP: "JoinGroup",
    12: "Heartbeat",
    13: "LeaveGroup",
    SYNC_GROUP: "SyncGroup",
    DESCRIBE_GROUPS: "DescribeGroups",
    16: "ListGroups",
    SASL_HANDSHAKE: "SaslHandshake",
    API_VERSIONS: "ApiVersions",
    22: "InitProducerId",
    23: "OffsetForLeaderEpoch",
    24: "AddPartitionsToTxn",
    25: "AddOffsetsToTxn",
    26: "EndTxn",
    28: "TxnOffsetCommit",
    32: "DescribeConfigs",
    SASL_AUTHENTICATE: "SaslAuthenticate",
    DESCRIBE_CLUSTER: "DescribeCluster",
    61: "DescribeProducers",
    65: "DescribeTransactions",
    66: "ListTransactions",
    68: "ConsumerGroupHeartbeat",
    69: "ConsumerGroupDescribe",
    71: "GetTelemetrySubscriptions",
    72: "PushTelemetry",
    DESCRIBE_TOPIC_PARTITIONS: "DescribeTopicPartitions",
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
    """The versions of `api_key` the proxy may serve (None: none): those kio knows, unless
    removed; the filters that read each request of an API narrow them
    (`filters.api_versions.ServedVersions`)."""
    return None if api_key in REMOVED else kio_versions(api_key)


@functools.cache
def admin_apis() -> frozenset[int]:
    """The APIs served only with `proxy.admin_apis=forward`: every API kio knows that is
    neither a client API nor removed."""
    return frozenset(api_key_map) - frozenset(CLIENT_APIS) - frozenset(REMOVED)


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
