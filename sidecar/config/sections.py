"""The sections of the settings tree: codec, training, sampling, registry, Kafka clients,
relay, proxy, metrics (`settings.Settings` is their root)."""

from __future__ import annotations

import os
import re
from typing import Any, Final, Literal, TypeAlias

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    field_validator,
    model_validator,
)

from sidecar.codec import (
    DEFAULT_HEADER_KEY,
    DEFAULT_MAX_OUTPUT_SIZE,
    DEFAULT_WIRE_FORMAT,
    FrameOptions,
    WireFormat,
)
from sidecar.errors import ConfigError
from sidecar.training.params import (
    DEFAULT_BATCH_LEVEL_BUDGET_US,
    DEFAULT_BUDGET_MB_PER_S,
    DEFAULT_BUDGET_US_PER_MESSAGE,
    DEFAULT_DICT_SIZES,
    DEFAULT_HELDOUT_FRACTION,
    DEFAULT_LEVELS,
    DEFAULT_MIN_HELDOUT,
    DEFAULT_MIN_SAMPLES,
    TrainingParams,
)

ENV_PREFIX = "ZDICT_"
#: Output topic of `run --mode decode` unless one is given.
DEFAULT_DECODED_TOPIC = "{topic}.decoded"
ENV_DELIMITER = "__"
#: Bytes a `--config` file may have: a settings file is a few KiB.
MAX_CONFIG_BYTES: Final = 1024 * 1024

#: `relay.mode`: compress input topics, or decode compressed ones.
RelayMode: TypeAlias = Literal["encode", "decode"]
#: `relay.guarantee`: offsets committed after delivery, or Kafka transactions.
Guarantee: TypeAlias = Literal["at-least-once", "exactly-once"]
#: `codec.output_mode`: `auto` writes raw values where batches fill past the dictionary's
#: crossover, frames elsewhere; `frames`: per-record frames always.
OutputModeSetting: TypeAlias = Literal["auto", "frames"]
#: A producer's batch codec (`compression.type`), as Kafka names them.
BatchCodec: TypeAlias = Literal["none", "gzip", "snappy", "lz4", "zstd"]
#: `log_format`: `auto` is console on a terminal, JSON lines otherwise.
LogFormat: TypeAlias = Literal["auto", "json", "console"]
LogLevel: TypeAlias = Literal["debug", "info", "warning", "error"]


class CodecSettings(BaseModel):
    """How values are encoded and decoded (the wire format's knobs)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    header_key: str = Field(
        default=DEFAULT_HEADER_KEY,
        min_length=1,
        max_length=64,
        description="record header carrying the dictionary id; every byte is paid per record",
    )
    wire_format: WireFormat = Field(
        default=DEFAULT_WIRE_FORMAT,
        description="compact: no frame magic or dictionary id, a 2-byte tag (9 bytes less per "
        "record); standard: what release 1 wrote, for decoders not yet upgraded",
    )
    level: int | None = Field(
        default=None, ge=-7, le=22, description="zstd level; unset: the level chosen at training"
    )
    min_size: int | None = Field(
        default=None,
        ge=0,
        description="bytes; smaller values pass through; unset: the measured break-even size",
    )
    max_output_size: int = Field(
        default=DEFAULT_MAX_OUTPUT_SIZE,
        ge=1,
        le=2**31 - 1,  # zstd takes a C size; no Kafka record comes near
        description="bytes; decoded values larger than this are refused",
    )
    checksum: bool = Field(default=False, description="write zstd's 4-byte frame checksum")
    frame_dict_id: bool = Field(
        default=True,
        description="standard frames: write the dictionary id into each frame (compact frames "
        "carry a fingerprint in the header instead)",
    )
    content_size: bool = Field(default=True, description="write the content size into each frame")
    output_mode: OutputModeSetting = Field(
        default="auto",
        description="auto: per partition, write raw values (no zd header; batch compression "
        "only) while the producer's batches hold more records than the dictionary's crossover, "
        "frames otherwise; frames: per-record frames always",
    )

    @property
    def frame(self) -> FrameOptions:
        return FrameOptions(
            checksum=self.checksum, dict_id=self.frame_dict_id, content_size=self.content_size
        )


class TrainingSettings(BaseModel):
    """How dictionaries are trained and chosen."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    dict_sizes: tuple[int, ...] = Field(
        default=DEFAULT_DICT_SIZES, min_length=1, description="dictionary sizes tried, bytes"
    )
    levels: tuple[int, ...] = Field(
        default=DEFAULT_LEVELS, min_length=1, description="zstd levels tried"
    )
    heldout_fraction: float = Field(
        default=DEFAULT_HELDOUT_FRACTION,
        gt=0.0,
        lt=1.0,
        description="newest share of the sample (per partition) kept out of training to measure "
        "the candidates",
    )
    min_samples: int = Field(
        default=DEFAULT_MIN_SAMPLES,
        ge=20,
        description="fewer usable samples and no training is attempted",
    )
    min_heldout: int = Field(
        default=DEFAULT_MIN_HELDOUT,
        ge=1,
        description="fewer held-out samples and no dictionary is promoted (measured: python -m "
        "sidecar.bench.heldout)",
    )
    promotion_margin: float = Field(
        default=0.02,
        ge=0.0,
        lt=1.0,
        description="a new dictionary must produce this fraction fewer bytes than the active one",
    )
    budget_us_per_message: float = Field(
        default=DEFAULT_BUDGET_US_PER_MESSAGE,
        ge=0.0,
        description="CPU budget of one message's encoding, µs, plus its bytes at budget_mb_per_s",
    )
    budget_mb_per_s: float = Field(
        default=DEFAULT_BUDGET_MB_PER_S,
        ge=0.0,
        description="the per-byte part of the CPU budget, as MB/s of input on one core",
    )
    batch_level_budget_us: float = Field(
        default=DEFAULT_BATCH_LEVEL_BUDGET_US,
        ge=0.0,
        description="extra CPU per record, µs, the producer's batch codec may take over zstd "
        "level 3 where raw values are written (0: no budget)",
    )
    grid_eval_limit: int = Field(
        default=4000,
        ge=100,
        description="held-out values the size x level grid is measured on; the pick: on all",
    )
    scrub: tuple[str, ...] = Field(
        default=(),
        description="regular expressions removed from training samples only, for privacy",
    )
    # When `run` trains (one trainer per namespace across the consumer group):
    enabled: bool = Field(
        default=True,
        description="false: never train in this process; it still follows the registry",
    )
    retrain_interval: float = Field(
        default=3600.0, gt=0.0, description="seconds between scheduled training runs"
    )
    min_interval: float = Field(
        default=60.0,
        ge=0.0,
        description="seconds between two runs of one namespace, and before a retry",
    )
    drift_tolerance: float = Field(
        default=0.1,
        gt=0.0,
        lt=1.0,
        description="retrain early when the live ratio is this fraction below the held-out one",
    )
    drift_window: float = Field(
        default=300.0, gt=0.0, description="seconds of traffic the live ratio is measured over"
    )
    drift_min_messages: int = Field(
        default=5000, ge=1, description="messages the window must hold to judge drift"
    )
    nice: int = Field(
        default=10,
        ge=0,
        le=19,
        description="niceness of the training process, so the relay comes first",
    )

    @field_validator("scrub")
    @classmethod
    def _scrub_compiles(cls, patterns: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in patterns:
            try:
                re.compile(pattern.encode())
            except re.error as exc:
                raise ValueError(f"{pattern!r} is not a regular expression: {exc}") from None
        return patterns

    @field_validator("dict_sizes")
    @classmethod
    def _sizes_in_range(cls, sizes: tuple[int, ...]) -> tuple[int, ...]:
        for size in sizes:
            if not 256 <= size <= 1 << 20:
                raise ValueError(f"{size} is not between 256 bytes and 1 MiB")
        return sizes

    @field_validator("levels")
    @classmethod
    def _levels_in_range(cls, levels: tuple[int, ...]) -> tuple[int, ...]:
        for level in levels:
            if not -7 <= level <= 22:
                raise ValueError(f"level {level} is not between -7 and 22")
        return levels

    def params(self, codec: CodecSettings) -> TrainingParams:
        return TrainingParams(
            dict_sizes=self.dict_sizes,
            levels=self.levels,
            min_samples=self.min_samples,
            min_heldout=self.min_heldout,
            promotion_margin=self.promotion_margin,
            budget_us_per_message=self.budget_us_per_message,
            budget_mb_per_s=self.budget_mb_per_s,
            grid_eval_limit=self.grid_eval_limit,
            batch_level_budget_us=self.batch_level_budget_us,
            frame=codec.frame,
            wire=codec.wire_format,
            header_key=codec.header_key,
            scrub=self.scrub,
        )


class SamplingSettings(BaseModel):
    """The reservoir of recent raw values `run` keeps per namespace for training."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_bytes: int = Field(
        default=8 * 1024 * 1024,
        ge=64 * 1024,
        description="bytes per namespace, values plus bookkeeping",
    )
    every: int = Field(
        default=10,
        ge=1,
        description="keep one record in this many (every record while there is no dictionary)",
    )
    min_messages: int = Field(
        default=2_000, ge=20, description="sample size before the first training"
    )
    backlog_sample: int = Field(
        default=20_000,
        ge=20,
        description="records read from a topic's backlog to train its first dictionary",
    )
    max_value_bytes: int = Field(
        default=65_536, ge=1, description="bytes; larger values are not sampled"
    )


class RegistrySettings(BaseModel):
    """The registry topic: every dictionary and activation, the source of truth across hosts."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = Field(
        default=True, description="false: the local store alone (one host, offline)"
    )
    topic: str = Field(
        default="_zdict_dictionaries",
        pattern=r"^[A-Za-z0-9._-]{1,249}$",
        description="the registry topic (compacted), shared by every sidecar",
    )
    create: bool = Field(default=True, description="create the topic (compacted) when missing")
    replication_factor: int = Field(
        default=-1, ge=-1, le=32767, description="for a created topic; -1: the broker's default"
    )
    timeout: float = Field(
        default=30.0, gt=0.0, le=600.0, description="seconds a publish or a read may take"
    )
    follow_interval: float = Field(
        default=5.0, gt=0.0, le=300.0, description="seconds between reads of new entries"
    )
    cache_bytes: int = Field(
        default=32 * 1024 * 1024,
        ge=0,
        le=2**40,
        description="bytes of dictionaries a reader keeps beyond the one in use; any other is "
        "read again from the registry by its offset when a record names it",
    )


# Parts of librdkafka property names whose values are secrets: kept as SecretStr, never logged
# or printed. From librdkafka's CONFIGURATION.md: sasl.password, ssl.key.password,
# ssl.keystore.password, ssl.key.pem, sasl.oauthbearer.config (may carry a client secret or a
# token), sasl.oauthbearer.client.secret (and its alias ...client.credentials.client.secret),
# sasl.oauthbearer.assertion.private.key.passphrase and .pem; a sasl.jaas.config some tools
# pass; every other PEM too (certificates are public, but one string is easier to audit).
_SECRET_PROPERTY_MARKERS = (
    "password",
    "passphrase",
    "secret",
    "token",
    "jaas",
    "private",
    "credentials",
    "oauthbearer.config",
)


def is_secret_property(name: str) -> bool:
    """True for librdkafka properties holding credentials (sasl.password, ssl.key.password,
    sasl.oauthbearer.config, any `*.pem`...)."""
    name = name.lower()
    return name.endswith(".pem") or any(marker in name for marker in _SECRET_PROPERTY_MARKERS)


class KafkaSettings(BaseModel):
    """librdkafka client properties, passed through verbatim by their librdkafka names.

    In TOML: a `[kafka]` table with quoted keys (`"sasl.password" = "..."`). In the environment:
    `ZDICT_KAFKA__SASL_PASSWORD` - the part after `KAFKA__`, lower-cased, with `_` read as `.`
    (librdkafka names use dots, never underscores). `bootstrap.servers` falls back to the
    `KAFKA_BOOTSTRAP_SERVERS` variable that Kafka tooling commonly sets.
    """

    model_config = ConfigDict(frozen=True)

    properties: dict[str, str | SecretStr] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _collect(cls, data: Any) -> Any:
        if isinstance(data, dict) and "properties" not in data:
            data = {"properties": data}
        if not isinstance(data, dict) or not isinstance(data.get("properties"), dict):
            return data
        normalised: dict[str, str | SecretStr] = {}
        for key, value in data["properties"].items():
            name = str(key).lower().replace("_", ".")
            if isinstance(value, bool):
                value = "true" if value else "false"
            elif not isinstance(value, str | int | float | SecretStr):
                raise ValueError(f"librdkafka property {name} must be a string or number")
            if isinstance(value, SecretStr):
                normalised[name] = value
            elif is_secret_property(name):
                normalised[name] = SecretStr(str(value))
            else:
                normalised[name] = str(value)
        return {"properties": normalised}

    def as_librdkafka_dict(self) -> dict[str, str]:
        """The properties as confluent-kafka takes them, secrets revealed (only for the client)."""
        return {
            k: v.get_secret_value() if isinstance(v, SecretStr) else v
            for k, v in self.properties.items()
        }

    def redacted(self) -> dict[str, str]:
        """The properties for logs: secrets as `***`."""
        return {k: "***" if isinstance(v, SecretStr) else v for k, v in self.properties.items()}

    def client_config(self, *layers: KafkaSettings) -> dict[str, str]:
        """These properties with `layers` (e.g. consumer-only ones) on top, ready for a client.

        `bootstrap.servers` falls back to $KAFKA_BOOTSTRAP_SERVERS.

        Raises:
            ConfigError: neither names a broker. There is no default: a guessed address made
                every command wait out its timeout before saying nothing was configured.
        """
        merged = self.as_librdkafka_dict()
        for layer in layers:
            merged.update(layer.as_librdkafka_dict())
        bootstrap = merged.get("bootstrap.servers") or os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
        if not bootstrap or not bootstrap.strip():
            raise ConfigError(
                "no Kafka broker configured: set KAFKA_BOOTSTRAP_SERVERS (or "
                "ZDICT_KAFKA__BOOTSTRAP_SERVERS) to HOST:PORT[,HOST:PORT...]"
            )
        merged["bootstrap.servers"] = bootstrap
        return merged


class RelaySettings(BaseModel):
    """The consume → encode → produce → commit loop."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    input_topics: tuple[str, ...] = Field(default=(), description="input topics, a JSON list")
    output_topic: str = Field(
        default="{topic}.zd", description="output topic; {topic} is replaced by the input topic"
    )
    group_id: str = Field(default="zdict-sidecar", min_length=1, description="consumer group")
    mode: RelayMode = Field(
        default="encode",
        description="decode: compressed topics back to plain values, by default into "
        "{topic}.decoded",
    )
    create_topics: bool = Field(default=False, description="create missing output topics")
    batch_size: int = Field(default=1000, ge=1, le=100_000, description="records per consume()")
    poll_timeout: float = Field(default=0.5, gt=0.0, le=10.0, description="seconds")
    commit_interval: float = Field(
        default=1.0, gt=0.0, le=60.0, description="seconds between offset commits"
    )
    unreachable_timeout: float = Field(
        default=60.0, gt=0.0, description="seconds without a broker before exiting non-zero"
    )
    backlog_wait: float = Field(
        default=60.0,
        ge=0.0,
        description="seconds a backlog waits for its first dictionary (trained from it) before "
        "it is relayed anyway; 0: never wait",
    )
    workers: int = Field(default=1, ge=1, le=64, description="processes in the consumer group")
    input_compression: BatchCodec = Field(
        default="none",
        description="the compression.type the producers of the input topics use (none: the "
        "Kafka clients' default): what the saving is counted against "
        "(zdict_stored_without_sidecar_bytes_total)",
    )
    compress: bool = Field(
        default=True, description="false: pass every record through, a cost baseline"
    )
    dead_letter_topic: str | None = Field(
        default=None,
        min_length=1,
        description="records that cannot be processed go here ({topic}: the input's); "
        "unset: the relay stops at them",
    )
    guarantee: Guarantee = Field(
        default="at-least-once",
        description="exactly-once: Kafka transactions; consumers must read read_committed",
    )
    transaction_records: int = Field(
        default=10_000,
        ge=1,
        description="exactly-once: commit the transaction after this many records",
    )
    transactional_id: str | None = Field(
        default=None,
        min_length=1,
        description="exactly-once: stable per worker; unset: zdict-<group>-<host>-<worker>",
    )
    worker_index: int = Field(
        default=0, ge=0, description="set by --workers for each worker process"
    )

    @field_validator("output_topic")
    @classmethod
    def _output_differs(cls, value: str) -> str:
        if value.strip() in {"", "{topic}"}:
            raise ValueError("the output topic must differ from the input topic")
        return value

    def transactional_id_for(self, host: str) -> str:
        """This worker's transactional.id: stable, so a restart fences its predecessor."""
        if self.transactional_id is not None:
            return self.transactional_id
        return f"zdict-{self.group_id}-{host}-{self.worker_index}"

    def dead_letter_for(self, topic: str) -> str | None:
        """The dead-letter topic of input `topic`, None when records are not set aside."""
        if self.dead_letter_topic is None:
            return None
        return self.dead_letter_topic.replace("{topic}", topic)

    def output_for(self, topic: str, *, decode: bool = False) -> str:
        """The output topic of `topic`; decoding, the default template is `{topic}.decoded`."""
        template = self.output_topic
        if decode and "output_topic" not in self.model_fields_set:
            template = DEFAULT_DECODED_TOPIC
        return template.replace("{topic}", topic)


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
    """`zdict-sidecar proxy`: the forwarding Kafka proxy next to the clients of a pod."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    listen: str = Field(
        default="127.0.0.1:9092",
        description="HOST:PORT of the bootstrap listener (the clients' bootstrap.servers)",
    )
    topics: tuple[str, ...] = Field(
        default=(),
        description="topics (namespaces) set up at start, a JSON list; other allowed topics "
        "are set up when a client first produces to them",
    )
    group_id: str = Field(
        default="zdict-proxy",
        min_length=1,
        description="consumer group the proxies of a topic join (never reading) so that one "
        "of them, the holder of partition 0, trains its dictionaries",
    )
    max_request_bytes: int = Field(
        default=16 * 1024 * 1024,
        ge=64 * 1024,
        le=1024 * 1024 * 1024,
        description="bytes one request may have, and one batch once decompressed; larger: the "
        "connection is closed (the client's max.request.size must stay below)",
    )
    max_in_flight: int = Field(
        default=32,
        ge=1,
        le=1000,
        description="requests of one connection served at once: an answer waits for upstream, "
        "so clients that send one request per partition need several under way",
    )
    max_buffered_bytes: int = Field(
        default=256 * 1024 * 1024,
        ge=64 * 1024,
        description="bytes of requests being served across all connections; a request waits "
        "for room before it is read (bounds the proxy's memory)",
    )
    max_connections: int = Field(
        default=64, ge=1, le=10_000, description="client connections served at once"
    )
    start_timeout: float = Field(
        default=30.0,
        gt=0.0,
        le=3600.0,
        description="seconds the start waits for the upstream cluster to answer before the "
        "proxy exits non-zero",
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
        description="seconds a request frame may take to arrive once its first "
        "byte has; slower: the connection is closed",
    )
    write_timeout: float = Field(
        default=30.0,
        gt=0.0,
        le=3600.0,
        description="seconds a client may take none of the answers the proxy writes to it "
        "(their bytes held in max_buffered_bytes meanwhile); longer: the connection is closed",
    )
    max_unread_bytes: int = Field(
        default=64 * 1024 * 1024,
        ge=64 * 1024,
        le=1024 * 1024 * 1024,
        description="bytes of answers one connection may hold for its client, so that a few "
        "clients cannot take all of max_buffered_bytes; a decoded Fetch response is cut at "
        "half of it (decoding holds twice its output)",
    )
    output_compression: Literal["zstd", "lz4", "gzip", "snappy", "none", "producer"] = Field(
        default="zstd",
        description="how the record batches the proxy rewrites are compressed (a batch that "
        "would not shrink goes uncompressed); producer: with the codec its producer chose, so "
        "that consumers without zstd read what their producers write",
    )
    allowed_topics: tuple[str, ...] = Field(
        default=(),
        description="topics clients may produce to, a JSON list of names or "
        'patterns (* and ? as in a shell; ["*"]: every topic); empty: the topics of '
        "ZDICT_PROXY__TOPICS. Internal topics (__*) and the registry topic never are",
    )
    max_records_per_request: int = Field(
        default=100_000,
        ge=1,
        le=10_000_000,
        description="records one Produce request may hold (bounds the CPU one "
        "request takes); more: RECORD_LIST_TOO_LARGE",
    )
    max_decompressed_request_bytes: int = Field(
        default=64 * 1024 * 1024,
        ge=64 * 1024,
        le=1024 * 1024 * 1024,
        description="bytes the compressed batches of one Produce request may "
        "decompress to, all together (one batch: ZDICT_PROXY__MAX_REQUEST_BYTES); more: "
        "RECORD_LIST_TOO_LARGE",
    )
    fetch_decode: Literal["all", "none"] = Field(
        default="all",
        description="all: the records of Fetch responses are decoded for every "
        "client but raw_fetch_client_ids; none: every client gets them as stored (zd frames)",
    )
    raw_fetch_client_ids: tuple[str, ...] = Field(
        default=(),
        description="client ids (client.id) that get fetched records as stored, "
        "for clients that decode themselves, a JSON list",
    )
    fetch_compression: Literal["input", "none", "gzip", "snappy", "lz4", "zstd"] = Field(
        default="input",
        description="the compression of a fetched batch whose records were "
        "decoded: input keeps the batch's own as stored (its producer's with "
        "output_compression=producer); none or gzip for consumers without zstd",
    )
    max_fetch_bytes: int = Field(
        default=64 * 1024 * 1024,
        ge=64 * 1024,
        le=1024 * 1024 * 1024,
        description="bytes of one Fetch response, from upstream and as sent "
        "decoded (a response is cut at a batch boundary before it grows past, as a broker cuts "
        "at fetch.max.bytes); a larger response from upstream closes the connection: the "
        "clients' fetch.max.bytes must stay below",
    )
    fetch_decode_budget_bytes: int = Field(
        default=32 * 1024 * 1024,
        ge=64 * 1024,
        le=1024 * 1024 * 1024,
        description="decoding work one Fetch response may cost, in bytes inflated (each "
        "record with a zd header counts its bytes, what it decodes or failed to decode to, "
        "and a fixed cost, whether it decodes or not); past it the response's first batch "
        "goes on as stored and later batches are left for the next Fetch. Values above it "
        "(or above the budget left) are never decoded: keep it above ZDICT_CODEC__MAX_OUTPUT_SIZE",
    )
    show_internal_topics: bool = Field(
        default=False,
        description="list internal topics (__consumer_offsets, ...) and the "
        "registry topic in Metadata as upstream does, and let clients fetch the registry topic",
    )
    max_topics: int = Field(
        default=100,
        ge=1,
        le=10_000,
        description="topics the proxy serves, each with a namespace of its own (encoder, "
        "training sample of up to ZDICT_SAMPLING__MAX_BYTES, metric series); a Produce to "
        "one more allowed topic is refused with POLICY_VIOLATION",
    )
    admin_apis: Literal["refuse", "forward"] = Field(
        default="refuse",
        description="refuse: the APIs producers and consumers do not need (topic, ACL, "
        "config, record deletion, quota, credential and cluster changes, and any API the "
        "proxy does not know as a client API) are answered with an authorization error and "
        "left out of ApiVersions; forward: passed upstream, where every local client acts as "
        "the proxy's principal. Never on internal topics or the registry topic",
    )
    max_metadata_topics: int = Field(
        default=1000,
        ge=1,
        le=1_000_000,
        description="topics one Metadata request may name (a request for every topic names "
        "none); more: answered without brokers or topics, the request not forwarded",
    )
    event_loop: Literal["uvloop", "asyncio"] = Field(
        default="uvloop",
        description="the event loop the connections run on: uvloop (libuv, compiled; the "
        "default: less CPU per request forwarded) or Python's own asyncio loop",
    )
    # Fair connections: idle ones give way, one client address cannot hold every slot.
    max_connections_per_client: int = Field(
        default=0,
        ge=0,
        le=10_000,
        description="connections one client address may hold (a new one past it closes that "
        "address's longest idle connection, or is refused); 0: only max_connections bounds "
        "them. Clients on loopback all share 127.0.0.1",
    )
    first_request_timeout: float = Field(
        default=10.0,
        gt=0.0,
        le=3600.0,
        description="seconds a connection may stay open without sending a byte; longer: it "
        "is closed (clients send ApiVersions as they connect)",
    )
    produce_slice_ms: float = Field(
        default=20.0,
        gt=0.0,
        le=10_000.0,
        description="milliseconds a Produce request's rewriting holds the event loop at a "
        "time; it goes on after the loop served the other connections",
    )
    compare_batches: bool = Field(
        default=True,
        description="with codec.output_mode=auto, write a batch near the dictionary's "
        "crossover both ways and keep the fewer bytes (one more compression of such a batch); "
        "false: the crossover alone decides",
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


class MetricsSettings(BaseModel):
    """The /metrics, /healthz and /readyz endpoint."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str = Field(default="0.0.0.0", description="address the endpoint listens on")
    port: int = Field(default=9400, ge=0, le=65535, description="0 picks a free port")
    enabled: bool = Field(default=True, description="false: no endpoint")
