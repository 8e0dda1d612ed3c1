"""The `proxy` section: `zdict-sidecar proxy`, the forwarding Kafka proxy."""

from __future__ import annotations

from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

#: Settings of the produce proxy, which `zdict-sidecar proxy` no longer runs (issue 26): section
#: path -> why it is gone. One still set fails the start naming it (`load_settings`).
REMOVED_SETTINGS: Final[dict[tuple[str, ...], str]] = {
    ("proxy", "forward"): "`zdict-sidecar proxy` always forwards now, the produce proxy is gone",
    ("proxy", "upstream_topic"): "the proxy writes each topic under the name the client uses",
    ("proxy", "linger_ms"): "the proxy forwards the clients' own batches, with no producer of "
    "its own to linger",
    ("proxy", "metadata_max_age"): "Metadata is forwarded to the brokers, nothing is cached",
}


class ProxySettings(BaseModel):
    """`zdict-sidecar proxy`: the Kafka proxy next to the clients of a pod."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    listen: str = Field(
        default="127.0.0.1:9092",
        description="HOST:PORT of the bootstrap listener (the clients' bootstrap.servers)",
    )
    topics: tuple[str, ...] = Field(
        default=(),
        description="topics (namespaces) set up at start, a JSON list; other allowed topics on "
        "their first Produce",
    )
    group_id: str = Field(
        default="zdict-proxy",
        min_length=1,
        description="consumer group the proxies of a topic join so that one of them trains its "
        "dictionaries",
    )
    max_request_bytes: int = Field(
        default=16 * 1024 * 1024,
        ge=64 * 1024,
        le=1024 * 1024 * 1024,
        description="bytes of one request, and of one batch decompressed; larger: the connection "
        "is closed (keep the clients' max.request.size below)",
    )
    max_in_flight: int = Field(
        default=32,
        ge=1,
        le=1000,
        description="requests of one connection served at once",
    )
    max_buffered_bytes: int = Field(
        default=256 * 1024 * 1024,
        ge=64 * 1024,
        description="bytes of requests being served across all connections (bounds the proxy's "
        "memory)",
    )
    max_connections: int = Field(
        default=64, ge=1, le=10_000, description="client connections served at once"
    )
    start_timeout: float = Field(
        default=30.0,
        gt=0.0,
        le=3600.0,
        description="seconds the start waits for the upstream cluster before exiting non-zero",
    )
    compress: bool = Field(
        default=True, description="false: pass every record through, a cost baseline"
    )
    broker_port_base: int = Field(
        default=9100,
        ge=0,
        le=65535,
        description="upstream broker N is served at this port + N, on the host of listen",
    )
    read_timeout: float = Field(
        default=30.0,
        gt=0.0,
        le=3600.0,
        description="seconds a request may take to arrive once its first byte has; slower: the "
        "connection is closed",
    )
    write_timeout: float = Field(
        default=30.0,
        gt=0.0,
        le=3600.0,
        description="seconds a client may leave its answers unread; longer: the connection is "
        "closed",
    )
    max_unread_bytes: int = Field(
        default=64 * 1024 * 1024,
        ge=64 * 1024,
        le=1024 * 1024 * 1024,
        description="bytes of answers one connection may hold for its client; a decoded Fetch "
        "response is cut at half of it",
    )
    output_compression: Literal["zstd", "lz4", "gzip", "snappy", "none", "producer"] = Field(
        default="zstd",
        description="codec of the batches the proxy rewrites (none where it would not shrink "
        "them); producer: each batch's own, for consumers without zstd",
    )
    allowed_topics: tuple[str, ...] = Field(
        default=(),
        description="topics clients may produce to, a JSON list of names or shell patterns "
        '(["*"]: all); empty: ZDICT_PROXY__TOPICS. Never internal topics (__*) or the registry',
    )
    max_records_per_request: int = Field(
        default=100_000,
        ge=1,
        le=10_000_000,
        description="records one Produce request may hold; more: RECORD_LIST_TOO_LARGE",
    )
    max_decompressed_request_bytes: int = Field(
        default=64 * 1024 * 1024,
        ge=64 * 1024,
        le=1024 * 1024 * 1024,
        description="bytes one Produce request's batches may decompress to in all; more: "
        "RECORD_LIST_TOO_LARGE",
    )
    fetch_decode: Literal["all", "none"] = Field(
        default="all",
        description="all: fetched records are decoded for every client but raw_fetch_client_ids; "
        "none: sent as stored",
    )
    raw_fetch_client_ids: tuple[str, ...] = Field(
        default=(),
        description="client ids (client.id) that get fetched records as stored, a JSON list",
    )
    fetch_compression: Literal["input", "none", "gzip", "snappy", "lz4", "zstd"] = Field(
        default="input",
        description="codec of a fetched batch whose records were decoded: input keeps the stored "
        "one; none or gzip for consumers without zstd",
    )
    max_fetch_bytes: int = Field(
        default=64 * 1024 * 1024,
        ge=64 * 1024,
        le=1024 * 1024 * 1024,
        description="bytes of one Fetch response, from upstream and decoded (cut at a batch "
        "boundary); a larger one from upstream closes the connection (keep the clients' "
        "fetch.max.bytes below)",
    )
    fetch_decode_budget_bytes: int = Field(
        default=32 * 1024 * 1024,
        ge=64 * 1024,
        le=1024 * 1024 * 1024,
        description="bytes one Fetch response may inflate to in decoding; past it the rest goes "
        "as stored or waits for the next Fetch. Keep it above ZDICT_CODEC__MAX_OUTPUT_SIZE",
    )
    show_internal_topics: bool = Field(
        default=False,
        description="list internal topics and the registry topic in Metadata, and let clients "
        "fetch the registry",
    )
    max_topics: int = Field(
        default=100,
        ge=1,
        le=10_000,
        description="topics the proxy serves, each a namespace (encoder, sample, metric series); "
        "a Produce to one more: POLICY_VIOLATION",
    )
    admin_apis: Literal["refuse", "forward"] = Field(
        default="refuse",
        description="refuse: APIs producers and consumers do not need (topic, ACL, config, quota "
        "and cluster changes, unknown APIs) get an authorization error; forward: passed upstream "
        "as the proxy's principal. Never on internal topics or the registry",
    )
    max_metadata_topics: int = Field(
        default=1000,
        ge=1,
        le=1_000_000,
        description="topics one Metadata request may name; more: answered empty, not forwarded",
    )
    event_loop: Literal["uvloop", "asyncio"] = Field(
        default="uvloop",
        description="uvloop (less CPU per request) or Python's own asyncio loop",
    )
    # Fair connections: idle ones give way, one client address cannot hold every slot.
    max_connections_per_client: int = Field(
        default=0,
        ge=0,
        le=10_000,
        description="connections one client address may hold (past it its longest idle one "
        "closes, or the new one is refused); 0: max_connections alone. Loopback clients all share "
        "127.0.0.1",
    )
    first_request_timeout: float = Field(
        default=10.0,
        gt=0.0,
        le=3600.0,
        description="seconds a connection may stay open without sending a byte",
    )
    produce_slice_ms: float = Field(
        default=20.0,
        gt=0.0,
        le=10_000.0,
        description="milliseconds a Produce request's rewriting holds the event loop before other "
        "connections are served",
    )
    compare_batches: bool = Field(
        default=True,
        description="with codec.output_mode=auto, write a batch near the crossover both ways and "
        "keep the fewer bytes; false: the crossover alone decides",
    )

    @model_validator(mode="after")
    def _request_fits_buffer(self) -> ProxySettings:
        if self.max_request_bytes > self.max_buffered_bytes:
            raise ValueError(
                f"ZDICT_PROXY__MAX_REQUEST_BYTES ({self.max_request_bytes}) is above "
                f"ZDICT_PROXY__MAX_BUFFERED_BYTES ({self.max_buffered_bytes}): such a request "
                "could never be read"
            )
        return self

    @model_validator(mode="after")
    def _topics_fit_max_topics(self) -> ProxySettings:
        if len(set(self.topics)) > self.max_topics:
            raise ValueError(
                f"ZDICT_PROXY__TOPICS names {len(set(self.topics))} topics, more than "
                f"ZDICT_PROXY__MAX_TOPICS ({self.max_topics}): raise it or name fewer"
            )
        return self

    @field_validator("listen")
    @classmethod
    def _host_port(cls, value: str) -> str:
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ValueError(f"expected HOST:PORT (e.g. 127.0.0.1:9092), got {value!r}")
        return value

    @property
    def host(self) -> str:
        return self.listen.rpartition(":")[0].strip("[]")

    @property
    def port(self) -> int:
        return int(self.listen.rpartition(":")[2])
