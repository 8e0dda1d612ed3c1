"""Kafka client properties: passed through verbatim, secrets kept secret, guarantees fixed."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any, cast

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from sidecar.config import load_settings
from sidecar.errors import ConfigError, KafkaUnavailable
from sidecar.kafka import (
    Refusals,
    consumer_config,
    delivery_timeout,
    is_all_brokers_down,
    is_authentication,
    is_max_poll_exceeded,
    is_no_offset,
    is_partition_eof,
    is_topic_already_exists,
    is_topic_settling,
    is_unknown_topic,
    make_producer,
    make_writer,
    max_message_bytes,
    partition_counts,
    producer_config,
)


@pytest.fixture(autouse=True)
def _a_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    """A broker address: a client's properties cannot be built without one."""
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "k1:9092")


def test_environment_properties_reach_the_clients_by_their_librdkafka_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ZDICT_KAFKA__BOOTSTRAP_SERVERS", "k1:9092,k2:9092")
    monkeypatch.setenv("ZDICT_KAFKA__SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("ZDICT_KAFKA__SASL_MECHANISM", "SCRAM-SHA-512")
    monkeypatch.setenv("ZDICT_KAFKA__SASL_USERNAME", "relay")
    monkeypatch.setenv("ZDICT_KAFKA__SASL_PASSWORD", "s3cr3t")
    monkeypatch.setenv("ZDICT_PRODUCER__LINGER_MS", "20")
    monkeypatch.setenv("ZDICT_CONSUMER__FETCH_MIN_BYTES", "1024")
    settings = load_settings()
    producer = producer_config(settings)
    consumer = consumer_config(settings)
    assert producer["bootstrap.servers"] == consumer["bootstrap.servers"] == "k1:9092,k2:9092"
    assert producer["sasl.password"] == "s3cr3t" and producer["sasl.mechanism"] == "SCRAM-SHA-512"
    assert producer["linger.ms"] == "20" and "linger.ms" not in consumer
    assert consumer["fetch.min.bytes"] == "1024" and "fetch.min.bytes" not in producer
    assert consumer["group.id"] == "zdict-sidecar"


def test_secrets_never_appear_in_reprs_or_redacted_views(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZDICT_KAFKA__SASL_PASSWORD", "s3cr3t")
    monkeypatch.setenv("ZDICT_KAFKA__SSL_KEY_PASSWORD", "k3y")
    settings = load_settings()
    assert "s3cr3t" not in repr(settings) and "k3y" not in repr(settings)
    assert settings.kafka.redacted() == {"sasl.password": "***", "ssl.key.password": "***"}


def test_an_invalid_kafka_value_is_reported_without_echoing_it() -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(kafka={"sasl.password": ["not", "a", "string", "s3cr3t"]})
    assert "s3cr3t" not in str(info.value)
    assert "sasl.password must be a string or number" in str(info.value)


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("ZDICT_PRODUCER__ACKS", "1"),
        ("ZDICT_PRODUCER__ENABLE_IDEMPOTENCE", "false"),
        ("ZDICT_CONSUMER__ENABLE_AUTO_COMMIT", "true"),
    ],
)
def test_settings_that_would_break_at_least_once_are_refused(
    monkeypatch: pytest.MonkeyPatch, var: str, value: str
) -> None:
    monkeypatch.setenv(var, value)
    settings = load_settings()
    client_config = producer_config if var.startswith("ZDICT_PRODUCER__") else consumer_config
    with pytest.raises(ConfigError, match=var):
        client_config(settings)


def test_the_guarantee_settings_are_always_on() -> None:
    settings = load_settings()
    assert producer_config(settings)["acks"] == "all"
    assert producer_config(settings)["enable.idempotence"] == "true"
    assert consumer_config(settings)["enable.auto.commit"] == "false"


def test_the_at_least_once_relay_producer_fails_fatally_rather_than_leave_a_gap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # One delivery report stands for the records before it in its partition
    # (sidecar/relay/offsets.py): no record may fail alone.
    built: list[dict[str, Any]] = []
    monkeypatch.setattr("sidecar.kafka.clients.Producer", lambda config: built.append(config))
    settings = load_settings()
    make_producer(settings, gapless=True)
    # A failed record aborts the transaction.
    make_producer(settings, transactional_id="zdict-x", gapless=True)
    # The proxy answers each request by its own reports: a failure stays retriable.
    make_producer(settings)
    assert built[0]["enable.gapless.guarantee"] == "true"
    assert "enable.gapless.guarantee" not in built[1]
    assert "enable.gapless.guarantee" not in built[2]
    monkeypatch.setenv("ZDICT_PRODUCER__ENABLE_GAPLESS_GUARANTEE", "false")
    with pytest.raises(ConfigError, match="ZDICT_PRODUCER__ENABLE_GAPLESS_GUARANTEE"):
        make_producer(load_settings(), gapless=True)


@pytest.mark.parametrize(
    ("producer", "transactional", "seconds"),
    [
        ({}, False, 300.0),
        ({"message.timeout.ms": "2000"}, False, 2.0),
        ({"delivery.timeout.ms": "45000"}, False, 45.0),
        ({"message.timeout.ms": "0"}, False, float("inf")),
        ({}, True, 30.0),  # librdkafka lowers it to transaction.timeout.ms
        ({"message.timeout.ms": "10000"}, True, 10.0),
    ],
)
def test_the_delivery_timeout_is_the_producers_effective_message_timeout(
    producer: dict[str, str], transactional: bool, seconds: float
) -> None:
    config = producer_config(
        load_settings(producer=producer), transactional_id="zdict-x" if transactional else None
    )
    assert delivery_timeout(config) == seconds


def test_the_output_topic_must_differ_from_the_input() -> None:
    with pytest.raises(ConfigError, match="ZDICT_RELAY__OUTPUT_TOPIC"):
        load_settings(relay={"output_topic": "{topic}"})


class _RefusedAdmin:
    """An admin client whose metadata requests fail; its error_cb (run by `poll`) hears `error`,
    as librdkafka reports a refused connection."""

    def __init__(self, error: KafkaError | None) -> None:
        self.refusals = Refusals()
        self.error = error
        self.requests = 0

    def list_topics(self, timeout: float) -> object:
        self.requests += 1
        raise KafkaException(KafkaError(KafkaError._TRANSPORT, "Local: Broker transport failure"))

    def poll(self, timeout: float) -> int:
        if self.error is not None:
            self.refusals(self.error)
        return 0


@pytest.mark.parametrize(
    ("code", "cause"),
    [
        (KafkaError._AUTHENTICATION, "authentication failed"),
        (KafkaError.SASL_AUTHENTICATION_FAILED, "authentication failed"),
        (KafkaError._SSL, "the TLS handshake failed"),
    ],
)
def test_a_refused_connection_fails_at_the_first_metadata_request_naming_the_cause(
    code: int, cause: str
) -> None:
    admin = _RefusedAdmin(KafkaError(code, "sasl_ssl://k1:9093/bootstrap: refused"))
    with pytest.raises(KafkaUnavailable) as info:
        partition_counts(cast(AdminClient, admin), ["orders"], timeout=60.0, bootstrap="k1:9093")
    assert admin.requests == 1
    assert f"refused the connection, {cause}" in str(info.value)
    assert "sasl_ssl://k1:9093/bootstrap: refused" in str(info.value)


def test_an_unreachable_cluster_still_gets_the_whole_timeout() -> None:
    admin = _RefusedAdmin(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    started = time.monotonic()
    with pytest.raises(KafkaUnavailable, match="no Kafka broker answered within 0 s"):
        partition_counts(cast(AdminClient, admin), ["orders"], timeout=0.3, bootstrap="k1:9093")
    assert time.monotonic() - started >= 0.3
    assert admin.refusals.first is None


class _AuthorizingAdmin:
    """An admin on an authorizing broker: its listing leaves out the topics this client may not
    Describe; asked by name, they are TOPIC_AUTHORIZATION_FAILED, an unknown one is UNKNOWN."""

    def __init__(self, visible: dict[str, int], refused: set[str]) -> None:
        self.visible = visible
        self.refused = refused

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> object:
        def entry(name: str) -> SimpleNamespace:
            if name in self.visible:
                return SimpleNamespace(
                    partitions=dict.fromkeys(range(self.visible[name])), error=None
                )
            code = (
                KafkaError.TOPIC_AUTHORIZATION_FAILED
                if name in self.refused
                else KafkaError.UNKNOWN_TOPIC_OR_PART
            )
            return SimpleNamespace(partitions={}, error=KafkaError(code))

        names = list(self.visible) if topic is None else [topic]
        return SimpleNamespace(topics={name: entry(name) for name in names})


def test_a_topic_the_client_may_not_describe_is_refused_naming_the_acl_not_reported_missing() -> (
    None
):
    admin = cast(AdminClient, _AuthorizingAdmin({"orders": 2}, refused={"secret"}))
    assert partition_counts(admin, ["orders", "gone"], timeout=5.0) == {"orders": 2}
    with pytest.raises(KafkaUnavailable) as info:
        partition_counts(admin, ["orders", "secret", "gone"], timeout=5.0, bootstrap="k1:9093")
    message = str(info.value)
    assert "refuses to describe topic(s) secret to this client" in message
    assert "TOPIC_AUTHORIZATION_FAILED" in message and "Describe ACL" in message
    assert "gone" not in message and "bootstrap.servers=k1:9093" in message


class _NewTopicAdmin:
    """An admin whose broker learns of a topic created a moment ago after `unknown_for` asks."""

    def __init__(self, unknown_for: int) -> None:
        self.unknown_for = unknown_for
        self.asks = 0

    def describe_configs(self, resources: list[Any], request_timeout: float) -> dict[Any, Any]:
        self.asks += 1
        futures: dict[Any, Future[dict[str, Any]]] = {}
        for resource in resources:
            future: Future[dict[str, Any]] = Future()
            if self.asks <= self.unknown_for:
                error = KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, "Broker: Unknown topic")
                future.set_exception(KafkaException(error))
            else:
                future.set_result({"max.message.bytes": SimpleNamespace(value="2000000")})
            futures[resource] = future
        return futures


def test_the_settings_of_a_topic_created_a_moment_ago_are_asked_for_again() -> None:
    admin = _NewTopicAdmin(unknown_for=2)
    assert max_message_bytes(cast(AdminClient, admin), ["out"], timeout=10.0) == {"out": 2_000_000}
    assert admin.asks == 3


def test_a_topic_that_stays_unknown_fails_after_the_timeout_naming_it() -> None:
    admin = _NewTopicAdmin(unknown_for=1_000_000)
    with pytest.raises(KafkaUnavailable, match="cannot read the settings of out"):
        max_message_bytes(cast(AdminClient, admin), ["out"], timeout=0.5)


@pytest.mark.parametrize(
    ("predicate", "codes"),
    [
        (is_partition_eof, {KafkaError._PARTITION_EOF}),
        (is_all_brokers_down, {KafkaError._ALL_BROKERS_DOWN}),
        (is_authentication, {KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED}),
        (is_no_offset, {KafkaError._NO_OFFSET}),
        (is_max_poll_exceeded, {KafkaError._MAX_POLL_EXCEEDED}),
        (is_unknown_topic, {KafkaError.UNKNOWN_TOPIC_OR_PART}),
        (is_topic_already_exists, {KafkaError.TOPIC_ALREADY_EXISTS}),
        (
            is_topic_settling,
            {
                KafkaError._UNKNOWN_PARTITION,
                KafkaError._UNKNOWN_TOPIC,
                KafkaError.UNKNOWN_TOPIC_OR_PART,
                KafkaError.LEADER_NOT_AVAILABLE,
                KafkaError.NOT_LEADER_FOR_PARTITION,
            },
        ),
    ],
)
def test_each_error_predicate_says_yes_to_its_codes_only(
    predicate: Callable[[KafkaError], bool], codes: set[int]
) -> None:
    others = {
        KafkaError._PARTITION_EOF,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._AUTHENTICATION,
        KafkaError._NO_OFFSET,
        KafkaError._MAX_POLL_EXCEEDED,
        KafkaError._TRANSPORT,
        KafkaError._MSG_TIMED_OUT,
        KafkaError._SSL,
        KafkaError.TOPIC_ALREADY_EXISTS,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
    } - codes
    assert all(predicate(KafkaError(code)) for code in codes)
    assert not any(predicate(KafkaError(code)) for code in others)


def test_a_writer_takes_the_user_producer_settings_and_names_itself_when_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ZDICT_KAFKA__BOOTSTRAP_SERVERS", "localhost:1")
    settings = load_settings()
    writer = make_writer(settings, "registry", {"linger.ms": "0"})
    writer.flush(0)
    monkeypatch.setenv("ZDICT_PRODUCER__NO_SUCH_PROPERTY", "1")
    with pytest.raises(ConfigError, match="the registry producer refused its settings"):
        make_writer(load_settings(), "registry", {"linger.ms": "0"})


def test_without_a_bootstrap_server_no_client_is_built_and_the_error_names_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS")
    with pytest.raises(ConfigError, match="set KAFKA_BOOTSTRAP_SERVERS \\(or ZDICT_KAFKA__"):
        consumer_config(load_settings())
    monkeypatch.setenv("ZDICT_KAFKA__BOOTSTRAP_SERVERS", "k2:9092")
    assert consumer_config(load_settings())["bootstrap.servers"] == "k2:9092"


def test_a_cluster_that_never_answers_names_the_timeout_setting_and_an_unresolved_host() -> None:
    admin = _RefusedAdmin(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    with pytest.raises(KafkaUnavailable) as info:
        partition_counts(
            cast(AdminClient, admin),
            ["orders"],
            timeout=0.1,
            bootstrap="127.0.0.1:1,no-such-broker.invalid:9092",
            setting="ZDICT_REGISTRY__TIMEOUT",
        )
    message = str(info.value)
    assert "(the wait is ZDICT_REGISTRY__TIMEOUT)" in message
    assert "DNS does not resolve no-such-broker.invalid (" in message
    assert "127.0.0.1 (" not in message
