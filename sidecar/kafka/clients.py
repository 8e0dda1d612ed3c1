"""Kafka clients: their construction, what their errors mean, and topic checks.

Every Kafka client of the package is built here, and only here are librdkafka's error codes
read (its own, `KafkaError._…`, are private names): other modules ask the predicates below.
The relay's correctness depends on a few client properties (manual commits, acks=all,
idempotence); they are set here and cannot be overridden into something unsafe.
"""

from __future__ import annotations

import logging
import re
import socket
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # public, but not in __all__
    AdminClient,
    ConfigResource,
    NewTopic,
)
from pydantic import SecretStr

from sidecar.config import Settings
from sidecar.errors import ConfigError, KafkaUnavailable, TopicMissing
from sidecar.kafka.batch_fill import with_batch_level

# Properties the at-least-once guarantee rests on: user settings cannot change them.
_CONSUMER_FIXED: Final = {
    "enable.auto.commit": "false",
    "enable.auto.offset.store": "false",
}
_PRODUCER_FIXED: Final = {"acks": "all", "enable.idempotence": "true"}
# ... and those of the at-least-once relay's producer: a record can then not fail alone (a gap is
# a fatal error), so one delivery report stands for the records before it in its partition
# (`sidecar.relay.offsets`). A transactional producer does not need it: a transaction with a
# failed record cannot commit.
_RELAY_PRODUCER_FIXED: Final = {"enable.gapless.guarantee": "true"}
_CONSUMER_DEFAULTS: Final = {
    "auto.offset.reset": "earliest",
    # Statistics feed zdict_consumer_lag_records; parsing them every 5 s costs nothing measurable.
    "statistics.interval.ms": "5000",
}
#: librdkafka's default consumer session timeout (ms), and the transaction timeout we use
#: below it unless told otherwise (librdkafka's own default, 60 s, is above it).
LIBRDKAFKA_SESSION_TIMEOUT_MS: Final = 45_000
#: librdkafka's default socket.timeout.ms (its client-side request timeout).
LIBRDKAFKA_SOCKET_TIMEOUT_MS: Final = 60_000
#: librdkafka's default message.timeout.ms (alias delivery.timeout.ms).
LIBRDKAFKA_MESSAGE_TIMEOUT_MS: Final = 300_000
#: Seconds between two looks for a topic created a moment ago.
TOPIC_METADATA_RETRY: Final = 0.2
DEFAULT_TRANSACTION_TIMEOUT_MS: Final = 30_000
#: Bytes of a record batch's own header and framing kept free under a topic's limit.
BATCH_HEADROOM: Final = 1024
#: The relay's producer reports its record batches this often (ms), for the stored-bytes metrics.
PRODUCER_STATISTICS_INTERVAL_MS: Final = "5000"
_PRODUCER_DEFAULTS: Final = {
    "linger.ms": "5",
    # Batch compression on top of the per-record frames: the relay's batches hold tens to
    # hundreds of records, and what frames still repeat across records (keys, header, JSON
    # left as literals) compresses again (`zdict-sidecar bench storage`: 72.2 -> 51.1 bytes a
    # record at full speed). librdkafka sends a batch uncompressed when compressing it does not
    # shrink it, so a batch of one record costs the attempt and no bytes.
    "compression.type": "zstd",
    "queue.buffering.max.messages": "200000",
}

ErrorCallback = Callable[[KafkaError], None]

#: librdkafka errors that retrying will not cure: the credentials or the certificates are wrong.
#: Without looking for them, a refused client only sees "Broker transport failure" until its
#: timeout runs out.
_REFUSALS: Final = {
    KafkaError._AUTHENTICATION: (
        "authentication failed: check ZDICT_KAFKA__SASL_MECHANISM, ZDICT_KAFKA__SASL_USERNAME "
        "and ZDICT_KAFKA__SASL_PASSWORD"
    ),
    KafkaError.SASL_AUTHENTICATION_FAILED: (
        "authentication failed: check ZDICT_KAFKA__SASL_MECHANISM, ZDICT_KAFKA__SASL_USERNAME "
        "and ZDICT_KAFKA__SASL_PASSWORD"
    ),
    KafkaError._SSL: (
        "the TLS handshake failed: ZDICT_KAFKA__SSL_CA_LOCATION must hold the CA that signed "
        "the broker's certificate, and the certificate must name the host of bootstrap.servers "
        "(hostnames are verified: ssl.endpoint.identification.algorithm=https)"
    ),
}
#: Seconds one metadata request may take before the client's error reports are looked at.
METADATA_SLICE: Final = 1.0


# -- what a KafkaError means ----------------------------------------------------------------------

_AUTHENTICATION_FAILED: Final = frozenset(
    {KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED}
)
# Errors of a topic whose metadata has not reached this client yet (just created elsewhere).
_SETTLING: Final = frozenset(
    {
        KafkaError._UNKNOWN_PARTITION,
        KafkaError._UNKNOWN_TOPIC,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
    }
)


def is_partition_eof(error: KafkaError) -> bool:
    """A consumer reached the end of a partition (an event, not a failure)."""
    return error.code() == KafkaError._PARTITION_EOF


def is_all_brokers_down(error: KafkaError) -> bool:
    """No broker of the cluster answers; the client goes on trying."""
    return error.code() == KafkaError._ALL_BROKERS_DOWN


def is_authentication(error: KafkaError) -> bool:
    """The cluster refused the client's credentials: retrying will not cure it."""
    return error.code() in _AUTHENTICATION_FAILED


def is_no_offset(error: KafkaError) -> bool:
    """A commit found no offset to commit (nothing new since the last one)."""
    return error.code() == KafkaError._NO_OFFSET


def is_max_poll_exceeded(error: KafkaError) -> bool:
    """The consumer left its group: it was not polled within max.poll.interval.ms."""
    return error.code() == KafkaError._MAX_POLL_EXCEEDED


def is_unknown_topic(error: KafkaError) -> bool:
    """The broker knows no such topic or partition."""
    return error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def is_topic_already_exists(error: KafkaError) -> bool:
    """A topic to create exists already (another client created it first)."""
    return error.code() == KafkaError.TOPIC_ALREADY_EXISTS


def is_topic_settling(error: KafkaError) -> bool:
    """The topic is not (fully) known to this client yet, as just after its creation elsewhere:
    asking again shortly may succeed."""
    return error.code() in _SETTLING


def deserialization_error(field: str, cause: BaseException) -> KafkaError:
    """What a consumed message is marked with when its `field` ("key" or "value") does not
    deserialize or decode: confluent-kafka's own codes for it, the cause in words."""
    code = KafkaError._KEY_DESERIALIZATION if field == "key" else KafkaError._VALUE_DESERIALIZATION
    return KafkaError(code, f"{field} does not deserialize: {type(cause).__name__}: {cause}")


def is_deserialization_error(error: KafkaError) -> bool:
    """A consumed message's key or value did not deserialize (`deserialization_error`)."""
    return error.code() in (KafkaError._KEY_DESERIALIZATION, KafkaError._VALUE_DESERIALIZATION)


class Refusals:
    """An error_cb that keeps the first refusal (authentication, TLS) a client reports."""

    def __init__(self) -> None:
        self.first: KafkaError | None = None

    def __call__(self, error: KafkaError) -> None:
        if self.first is None and error.code() in _REFUSALS:
            self.first = error

    def check(self, bootstrap: str) -> None:
        """Raise `KafkaUnavailable` naming the refusal, if there was one."""
        if self.first is not None:
            raise KafkaUnavailable(
                f"Kafka at bootstrap.servers={bootstrap} refused the connection, "
                f"{_REFUSALS[self.first.code()]}: {self.first.str()}"
            )


class Admin(AdminClient):
    """An AdminClient whose `refusals` hold what its error_cb reported (served by `poll`)."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.refusals = Refusals()
        full: dict[str, Any] = {**config, "error_cb": self.refusals}
        # `poll` would also hand over librdkafka's log lines: one per failed connection
        # attempt. What they say reaches the user once, in the error this client's caller
        # reports (refused, or no broker answered), so the admin client logs nothing of its own.
        full.setdefault("log_level", 0)
        super().__init__(full)


def _checked(role: str, user: dict[str, str], fixed: dict[str, str]) -> dict[str, str]:
    for key, required in fixed.items():
        if key in user and user[key].lower() != required:
            raise ConfigError(
                f"ZDICT_{role.upper()}__{key.upper().replace('.', '_')}={user[key]!r} would break "
                f"the delivery guarantee; zdict-sidecar always uses {key}={required}"
            )
    return user


StatsCallback = Callable[[str], None]
CommitCallback = Callable[[KafkaError | None, list[TopicPartition]], None]


def consumer_config(
    settings: Settings,
    error_cb: ErrorCallback | None = None,
    stats_cb: StatsCallback | None = None,
    commit_cb: CommitCallback | None = None,
    group_id: str | None = None,
) -> dict[str, Any]:
    """librdkafka consumer properties: the user's, our defaults below them, the fixed above.
    The group is the user's group.id, else `group_id`, else the relay's group."""
    user = _checked("consumer", settings.kafka.client_config(settings.consumer), _CONSUMER_FIXED)
    config: dict[str, Any] = {**_CONSUMER_DEFAULTS, **user, **_CONSUMER_FIXED}
    config["group.id"] = user.get("group.id", group_id or settings.relay.group_id)
    config["logger"] = logging.getLogger("librdkafka.consumer")
    if error_cb is not None:
        config["error_cb"] = error_cb
    if stats_cb is not None:
        config["stats_cb"] = stats_cb
    if commit_cb is not None:
        config["on_commit"] = commit_cb
    return config


def producer_config(
    settings: Settings,
    error_cb: ErrorCallback | None = None,
    transactional_id: str | None = None,
) -> dict[str, Any]:
    """librdkafka producer properties: the user's, our defaults below them, the fixed above.

    With `transactional_id` (exactly-once mode) the producer is transactional, and its
    transaction timeout must stay below the consumer group's session timeout: a transaction
    left open by a dead member is then aborted before its partitions can move on.
    """
    user = _checked("producer", settings.kafka.client_config(settings.producer), _PRODUCER_FIXED)
    if "transactional.id" in user:
        raise ConfigError(
            "ZDICT_PRODUCER__TRANSACTIONAL_ID: set ZDICT_RELAY__GUARANTEE=exactly-once (and "
            "ZDICT_RELAY__TRANSACTIONAL_ID if the default per-worker id does not suit) instead"
        )
    config: dict[str, Any] = {**_PRODUCER_DEFAULTS, **user, **_PRODUCER_FIXED}
    if transactional_id is not None:
        config["transactional.id"] = transactional_id
        config.setdefault("transaction.timeout.ms", str(DEFAULT_TRANSACTION_TIMEOUT_MS))
        consumer = settings.kafka.client_config(settings.consumer)
        session = int(consumer.get("session.timeout.ms", LIBRDKAFKA_SESSION_TIMEOUT_MS))
        if int(config["transaction.timeout.ms"]) >= session:
            raise ConfigError(
                f"ZDICT_PRODUCER__TRANSACTION_TIMEOUT_MS={config['transaction.timeout.ms']} must "
                f"be below the consumer's session.timeout.ms ({session}): a transaction a dead "
                "member left open must end before its partitions move to another member"
            )
    config["logger"] = logging.getLogger("librdkafka.producer")
    if error_cb is not None:
        config["error_cb"] = error_cb
    return config


def _refused(settings: Settings, role: str, exc: KafkaException) -> ConfigError:
    """librdkafka refused a property (unknown name, bad value): a configuration error.

    The message names the setting as its environment variable; secret values are masked in case
    librdkafka echoed one.
    """
    text = exc.args[0].str() if isinstance(exc.args[0], KafkaError) else str(exc.args[0])
    text = text.strip()
    for layer in (settings.kafka, settings.consumer, settings.producer):
        for value in layer.properties.values():
            if isinstance(value, SecretStr) and value.get_secret_value():
                text = text.replace(value.get_secret_value(), "***")
    where = (
        "a ZDICT_KAFKA__ setting"
        if role == "admin"
        else f"a ZDICT_KAFKA__ or ZDICT_{role.upper()}__ setting"
    )
    names = re.findall(r'property:? "([^"]+)"', text)
    if names:
        prop, env = names[-1], names[-1].upper().replace(".", "_")
        own = {"consumer": settings.consumer, "producer": settings.producer}.get(role)
        if own is not None and prop in own.properties:
            where = f"ZDICT_{role.upper()}__{env}"
        elif prop in settings.kafka.properties:
            where = f"ZDICT_KAFKA__{env}"
    return ConfigError(f"{where}: the Kafka {role} client refused it: {text}")


def make_consumer(
    settings: Settings,
    error_cb: ErrorCallback | None = None,
    stats_cb: StatsCallback | None = None,
    commit_cb: CommitCallback | None = None,
    group_id: str | None = None,
) -> Consumer:
    """A consumer (see `consumer_config`; a property librdkafka refuses: `ConfigError`)."""
    try:
        return Consumer(consumer_config(settings, error_cb, stats_cb, commit_cb, group_id))
    except KafkaException as exc:
        raise _refused(settings, "consumer", exc) from None


def make_producer(
    settings: Settings,
    error_cb: ErrorCallback | None = None,
    transactional_id: str | None = None,
    batch_bytes: int | None = None,
    stats_cb: StatsCallback | None = None,
    gapless: bool = False,
    batch_level: int | None = None,
) -> Producer:
    """A producer; `batch_bytes` caps its record batches (bytes) below the smallest
    `max.message.bytes` of the topics it writes to. With `stats_cb`, librdkafka's statistics
    (every 5 s unless the user's ZDICT_PRODUCER__STATISTICS_INTERVAL_MS says otherwise).
    `gapless` (the at-least-once relay's, not for a transactional producer) sets
    enable.gapless.guarantee: one delivery report may then stand for the records before it.
    `batch_level`: the zstd level chosen at training for its batches (`with_batch_level`: a
    ZDICT_PRODUCER__COMPRESSION_LEVEL of the user's wins)."""
    config = with_batch_level(producer_config(settings, error_cb, transactional_id), batch_level)
    if gapless and transactional_id is None:
        _checked("producer", settings.kafka.client_config(settings.producer), _RELAY_PRODUCER_FIXED)
        config.update(_RELAY_PRODUCER_FIXED)
    if stats_cb is not None:
        # The record batches it sent: zdict_stored_bytes_total and its siblings.
        config.setdefault("statistics.interval.ms", PRODUCER_STATISTICS_INTERVAL_MS)
        config["stats_cb"] = stats_cb
    if batch_bytes is not None:
        cap = max(1024, batch_bytes - BATCH_HEADROOM)
        config["batch.size"] = str(min(int(config.get("batch.size", 1_000_000)), cap))
    try:
        return Producer(config)
    except KafkaException as exc:
        raise _refused(settings, "producer", exc) from None


def delivery_timeout(config: Mapping[str, Any]) -> float:
    """Seconds a record of a producer with `config` (`producer_config`'s) may wait for its
    acknowledgement before librdkafka fails it: message.timeout.ms (or its alias
    delivery.timeout.ms), at most transaction.timeout.ms when transactional (librdkafka lowers
    it to that); infinite for 0."""
    raw = config.get("message.timeout.ms", config.get("delivery.timeout.ms"))
    ms = int(raw) if raw is not None else LIBRDKAFKA_MESSAGE_TIMEOUT_MS
    if "transactional.id" in config:
        txn = int(config.get("transaction.timeout.ms", DEFAULT_TRANSACTION_TIMEOUT_MS))
        ms = txn if ms == 0 else min(ms, txn)
    return ms / 1000 if ms > 0 else float("inf")


def make_reader(
    settings: Settings, purpose: str, overrides: Mapping[str, str] | None = None
) -> Consumer:
    """A consumer for `assign()` only: it never joins the relay's group and never commits.

    For reading a topic by offsets (a training sample, the registry, a verification). `purpose`
    names the throwaway group id, which shows up in broker logs; `overrides` win over the
    user's consumer settings.
    """
    config = consumer_config(settings)
    config.update(overrides or {})
    config["group.id"] = f"zdict-{purpose}-{uuid.uuid4().hex}"
    config["statistics.interval.ms"] = "0"
    config["enable.partition.eof"] = "false"
    try:
        return Consumer(config)
    except KafkaException as exc:
        raise _refused(settings, "consumer", exc) from None


def make_writer(settings: Settings, purpose: str, overrides: Mapping[str, str]) -> Producer:
    """A producer for a topic of our own (the registry): the user's producer settings, the
    fixed ones included, with `overrides` on top. `purpose` names it in a refusal.

    Raises:
        ConfigError: librdkafka refused a property.
    """
    config = producer_config(settings)
    config.update(overrides)
    try:
        return Producer(config)
    except KafkaException as exc:
        raise ConfigError(f"the {purpose} producer refused its settings: {exc}") from None


def make_admin(settings: Settings) -> AdminClient:
    config: dict[str, Any] = dict(settings.kafka.client_config())
    config["logger"] = logging.getLogger("librdkafka.admin")
    try:
        return Admin(config)
    except KafkaException as exc:
        raise _refused(settings, "admin", exc) from None


def topic_id(admin: AdminClient, topic: str, timeout: float) -> str | None:
    """The id the cluster gave `topic` (a new one whenever it is created again); None when it
    cannot be described."""
    futures = admin.describe_topics(TopicCollection([topic]), request_timeout=timeout)
    try:
        return str(futures[topic].result(timeout=timeout + 5).topic_id)
    except KafkaException:
        return None


def offsets_since(
    reader: Consumer, topic: str, at_ms: int, timeout: float
) -> list[tuple[int, int, int]]:
    """Per partition of `topic`: (partition, the oldest offset present, the first offset whose
    record was written at or after `at_ms`, or the partition's end if none was).

    Raises:
        TopicMissing: the topic does not exist.
        KafkaUnavailable: the cluster did not answer within `timeout` seconds.
    """
    try:
        found = reader.list_topics(topic, timeout=timeout).topics.get(topic)
        if found is None or found.error is not None or not found.partitions:
            raise TopicMissing(f"topic {topic} does not exist")
        partitions = sorted(found.partitions)
        times = reader.offsets_for_times(
            [TopicPartition(topic, p, at_ms) for p in partitions], timeout=timeout
        )
        spans = []
        for tp in times:
            low, high = reader.get_watermark_offsets(tp, timeout=timeout, cached=False)
            spans.append((tp.partition, int(low), high if tp.offset < 0 else tp.offset))
    except KafkaException as exc:
        raise KafkaUnavailable(f"cannot read the offsets of topic {topic}: {exc}") from None
    return spans


def plain_producer(bootstrap: str, properties: Mapping[str, Any] | None = None) -> Producer:
    """A producer with librdkafka's defaults and `properties` on top: for benchmarks and test
    traffic, without the relay's settings or guarantees."""
    return Producer({"bootstrap.servers": bootstrap, **(properties or {})})


def plain_consumer(
    bootstrap: str, group_id: str, properties: Mapping[str, Any] | None = None
) -> Consumer:
    """A consumer with librdkafka's defaults and `properties` on top (see `plain_producer`)."""
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group_id, **(properties or {})})


def application_producer(config: Mapping[str, Any]) -> Producer:
    """The application's own producer, exactly as its `config` says (`sidecar.serde`, which
    compresses in the application's process: its guarantees are the application's choice)."""
    return Producer(dict(config))


def application_consumer(config: Mapping[str, Any]) -> Consumer:
    """The application's own consumer, exactly as its `config` says (see
    `application_producer`)."""
    return Consumer(dict(config))


def plain_admin(bootstrap: str) -> AdminClient:
    """An admin client with librdkafka's defaults (see `plain_producer`)."""
    return AdminClient({"bootstrap.servers": bootstrap})


def unresolved_hosts(bootstrap: str) -> list[str]:
    """The hosts of `bootstrap` (`HOST:PORT,...`) that DNS does not resolve, with why."""
    unresolved = []
    for entry in bootstrap.split(","):
        address = entry.strip().rpartition("://")[2]
        host = address.rpartition(":")[0].strip("[]") or address
        if not host:
            continue
        try:
            socket.getaddrinfo(host, None)
        except socket.gaierror as exc:
            unresolved.append(f"{host} ({exc.strerror})")
        except UnicodeError:
            unresolved.append(f"{host} (not a valid host name)")
    return unresolved


def unreachable(bootstrap: str, timeout: float, setting: str | None, cause: object) -> str:
    """The message for a cluster that did not answer within `timeout` seconds: the setting
    that bounds the wait, and a DNS hint when a bootstrap host does not resolve."""
    text = (
        f"no Kafka broker answered within {timeout:.0f} s at bootstrap.servers={bootstrap}: {cause}"
    )
    if setting:
        text += f" (the wait is {setting})"
    names = unresolved_hosts(bootstrap)
    if names:
        text += (
            f"; DNS does not resolve {', '.join(names)}: check the host names in "
            "KAFKA_BOOTSTRAP_SERVERS (or ZDICT_KAFKA__BOOTSTRAP_SERVERS) and this host's DNS"
        )
    return text


def partition_counts(
    admin: AdminClient,
    topics: list[str],
    timeout: float,
    bootstrap: str = "?",
    setting: str | None = None,
) -> dict[str, int]:
    """Partitions per existing topic among `topics` (missing topics are absent from the result).

    Metadata is asked for in slices of `METADATA_SLICE` seconds; between them the client's error
    reports are read, so a refusal (wrong password, untrusted or misnamed certificate) fails at
    once, naming its cause, instead of after `timeout`. `setting` names what sets `timeout`,
    for the message when nothing answered.

    Raises:
        KafkaUnavailable: the cluster refused the client, or no broker answered within `timeout`
            seconds.
    """
    refusals: Refusals | None = getattr(admin, "refusals", None)
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        try:
            metadata = admin.list_topics(timeout=max(0.1, min(METADATA_SLICE, remaining)))
            break
        except KafkaException as exc:
            if refusals is not None:
                admin.poll(0)  # runs the error_cb with what the client saw meanwhile
                refusals.check(bootstrap)
            if time.monotonic() >= deadline:
                raise KafkaUnavailable(
                    unreachable(bootstrap, timeout, setting, exc.args[0])
                ) from None
    counts: dict[str, int] = {}
    for name in topics:
        topic = metadata.topics.get(name)
        if topic is not None and topic.error is None:
            counts[name] = len(topic.partitions)
    absent = [name for name in topics if name not in counts]
    refused = _refused_topics(admin, absent, max(0.1, min(METADATA_SLICE, remaining)))
    if refused:
        raise KafkaUnavailable(
            f"the cluster at bootstrap.servers={bootstrap} refuses to describe topic(s) "
            f"{', '.join(refused)} to this client (TOPIC_AUTHORIZATION_FAILED): each does not "
            "exist, or the client's principal lacks the Describe ACL on it; grant the ACLs its "
            "role needs (deploy/README.md, ACLs)"
        )
    return counts


def _refused_topics(admin: AdminClient, names: list[str], timeout: float) -> list[str]:
    """Those of `names` the cluster refuses to describe to this client. A listing of every topic
    leaves out those the client may not Describe, as if they did not exist; asked by name, an
    authorizing broker says TOPIC_AUTHORIZATION_FAILED (for a missing topic too: it does not
    tell an unauthorised client what exists)."""
    refused = []
    for name in names:
        try:
            topic = admin.list_topics(topic=name, timeout=timeout).topics.get(name)
        except KafkaException:
            continue  # unanswered: the topic stays missing for the caller, as before
        error = None if topic is None else topic.error
        if error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            refused.append(name)
    return refused


def max_message_bytes(admin: AdminClient, topics: list[str], timeout: float) -> dict[str, int]:
    """`max.message.bytes` of each topic (what one record batch may weigh there)."""
    found = topic_settings(admin, topics, ("max.message.bytes",), timeout)
    return {topic: int(values["max.message.bytes"]) for topic, values in found.items()}


def topic_settings(
    admin: AdminClient, topics: list[str], names: Sequence[str], timeout: float
) -> dict[str, dict[str, str]]:
    """Settings `names` of each topic (DescribeConfigs), as the broker states them.

    A topic created a moment ago may not be known to the broker answering yet (its metadata
    arrives shortly after the creation is acknowledged): asked again until `timeout` seconds.

    Raises:
        KafkaUnavailable: a topic's settings could not be read (missing, refused, no answer).
    """
    deadline = time.monotonic() + timeout
    found: dict[str, dict[str, str]] = {}
    while True:
        pending = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in topics if t not in found]
        unknown: list[str] = []
        for resource, future in admin.describe_configs(pending, request_timeout=timeout).items():
            try:
                entries = future.result(timeout=timeout)
            except KafkaException as exc:
                error = exc.args[0]
                missing = isinstance(error, KafkaError) and is_unknown_topic(error)
                if missing and time.monotonic() < deadline:
                    unknown.append(resource.name)
                    continue
                raise KafkaUnavailable(
                    f"cannot read the settings of {resource.name}: {exc}"
                ) from None
            found[resource.name] = {name: str(entries[name].value) for name in names}
        if not unknown:
            return found
        time.sleep(TOPIC_METADATA_RETRY)


def ensure_output_topics(
    admin: AdminClient,
    pairs: dict[str, str],
    create: bool,
    timeout: float,
    bootstrap: str = "?",
    setting: str | None = None,
) -> dict[str, int]:
    """Check (or create) every output topic; returns partitions per input and output topic.

    `pairs` maps input topic → output topic. Missing outputs are created with the input's
    partition count when `create` is true, otherwise reported. `setting` names what sets
    `timeout` (`partition_counts`).
    """
    topics = sorted(set(pairs) | set(pairs.values()))
    counts = partition_counts(admin, topics, timeout, bootstrap, setting)
    missing_inputs = [t for t in pairs if t not in counts]
    if missing_inputs:
        raise TopicMissing(
            f"input topic(s) {', '.join(missing_inputs)} do not exist; create them or fix "
            "ZDICT_RELAY__INPUT_TOPICS / --input-topic"
        )
    to_create = [
        NewTopic(out, num_partitions=counts[inp]) for inp, out in pairs.items() if out not in counts
    ]
    if to_create and not create:
        names = ", ".join(t.topic for t in to_create)
        raise TopicMissing(
            f"output topic(s) {names} do not exist; create them, or run with --create-topics to "
            "create them with the input's partition count"
        )
    futures = admin.create_topics(to_create, operation_timeout=timeout) if to_create else {}
    for future in futures.values():
        try:
            future.result(timeout=timeout)
        except KafkaException as exc:
            if not is_topic_already_exists(exc.args[0]):  # another worker won
                raise KafkaUnavailable(f"could not create output topic: {exc.args[0]}") from None
    created = [t.topic for t in to_create]
    deadline = time.monotonic() + timeout
    while created:
        # As above: the new topics' metadata may trail their creation by a moment.
        counts.update(partition_counts(admin, created, timeout, bootstrap, setting))
        created = [t for t in created if t not in counts]
        if created and time.monotonic() > deadline:
            raise KafkaUnavailable(
                f"output topic(s) {', '.join(created)} were created but are still unknown to "
                f"the brokers after {timeout:.0f} s"
            )
        if created:
            time.sleep(TOPIC_METADATA_RETRY)
    return counts


def reads_from_start(settings: Settings) -> bool:
    """Whether the relay's group starts a partition it never committed at its beginning."""
    reset = str(consumer_config(settings).get("auto.offset.reset", "largest"))
    return reset in {"earliest", "smallest", "beginning"}


def backlog(
    consumer: Consumer, topic: str, partitions: int, timeout: float, *, from_start: bool
) -> int:
    """Records of `topic` its consumer's group has yet to read: from the committed offset (or,
    with none, the start of the partition when `from_start`, else its end) to the end of every
    partition.

    Raises:
        KafkaUnavailable: the offsets could not be read within `timeout` seconds.
    """
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    try:
        committed = consumer.committed(tps, timeout=timeout)
        total = 0
        for tp in committed:
            low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, tp.partition), timeout=timeout
            )
            start = tp.offset if tp.offset >= 0 else (low if from_start else high)
            total += max(0, high - max(start, low))
    except KafkaException as exc:
        raise KafkaUnavailable(f"cannot read the offsets of {topic}: {exc}") from None
    return total
