"""`zdict-sidecar proxy` to a secured upstream: clients speak PLAINTEXT on loopback,
the proxy speaks TLS and authenticates with SASL, as itself, on every upstream connection.

A private broker (``kafka-local --home``) gets three listeners next to its PLAINTEXT one:
SECURE (SASL_SSL, SCRAM-SHA-512), SASLPLAIN (SASL_PLAINTEXT, PLAIN) and TLS (SSL), with a CA
made here. The proxy runs as a real process configured only through ``ZDICT_KAFKA__*``
variables (librdkafka names, as the relay's); a confluent-kafka producer and a consumer group go
through it and read back byte-exact what they wrote. A wrong password stops the proxy at start
with exit 1 and the broker's own message; a client configured with SASL against the proxy is
refused with a clear message. No other broker is needed (one JVM for the whole module).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # public, but not in __all__
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from tests.pki import CertificateAuthority

from .forward_proxies import allowed, start_proxy
from .launch import StartSidecar, environment_for, start_sidecars
from .private_broker import PrivateBroker, StartPrivateBroker
from .process import Sidecar
from .topics import create_topic
from .upstream_records import event, headers_of
from .waiting import wait_until

USER = "zdict-proxy"
#: Distinctive, so a leak shows up in any text it reaches.
PASSWORD = "Pw-5b1d7e-proxy-never-log-me"
WRONG_PASSWORD = "Pw-wrong-0c4a9f-never-log-me-either"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
PLAIN = (
    f'org.apache.kafka.common.security.plain.PlainLoginModule required user_{USER}="{PASSWORD}";'
)
#: What a broker answers a wrong SCRAM password with (SaslAuthenticate's error message).
REFUSED = (
    "Authentication failed during authentication due to invalid credentials with SASL "
    "mechanism SCRAM-SHA-512"
)
#: Seconds a client through the proxy may take to deliver or read what it expects.
CLIENT_TIMEOUT = 60.0


class Lines(logging.Handler):
    """The messages of the log records it is handed (a client's librdkafka lines)."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@dataclass(frozen=True)
class Secured:
    broker: PrivateBroker
    ca: CertificateAuthority

    def env(self, listener: str, password: str = PASSWORD) -> dict[str, str | None]:
        """The proxy's settings for `listener`, as an operator sets them."""
        security = {
            "SECURE": {
                "ZDICT_KAFKA__SECURITY_PROTOCOL": "SASL_SSL",
                "ZDICT_KAFKA__SASL_MECHANISM": "SCRAM-SHA-512",
                "ZDICT_KAFKA__SASL_USERNAME": USER,
                "ZDICT_KAFKA__SASL_PASSWORD": password,
                "ZDICT_KAFKA__SSL_CA_LOCATION": str(self.ca.ca_pem),
            },
            "SASLPLAIN": {
                "ZDICT_KAFKA__SECURITY_PROTOCOL": "SASL_PLAINTEXT",
                "ZDICT_KAFKA__SASL_MECHANISM": "PLAIN",
                "ZDICT_KAFKA__SASL_USERNAME": USER,
                "ZDICT_KAFKA__SASL_PASSWORD": password,
            },
            "TLS": {
                "ZDICT_KAFKA__SECURITY_PROTOCOL": "SSL",
                "ZDICT_KAFKA__SSL_CA_LOCATION": str(self.ca.ca_pem),
            },
        }[listener]
        return {
            "KAFKA_BOOTSTRAP_SERVERS": None,
            "ZDICT_KAFKA__BOOTSTRAP_SERVERS": self.broker.listeners[listener],
            "ZDICT_TRAINING__ENABLED": "false",
            **security,
        }


@pytest.fixture(scope="module")
def secured(
    private_broker: StartPrivateBroker, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Secured]:
    ca = CertificateAuthority.create(tmp_path_factory.mktemp("pki"))
    keystore = str(ca.issue("broker", ["127.0.0.1", "localhost"]))
    properties = {
        "sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN",
        "listener.name.secure.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.secure.scram-sha-512.sasl.jaas.config": SCRAM,
        "listener.name.saslplain.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.saslplain.plain.sasl.jaas.config": PLAIN,
    }
    for name in ("secure", "tls"):
        properties[f"listener.name.{name}.ssl.keystore.type"] = "PEM"
        properties[f"listener.name.{name}.ssl.keystore.location"] = keystore
    broker = private_broker(
        "forward-security",
        listeners=["SECURE:SASL_SSL", "SASLPLAIN:SASL_PLAINTEXT", "TLS:SSL"],
        properties=properties,
    )
    upsert = UserScramCredentialUpsertion(
        USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), PASSWORD.encode()
    )
    admin = broker.admin()  # referenced until its futures are done: a dropped client aborts them
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(timeout=30)
    secure_admin = AdminClient(
        {
            "bootstrap.servers": broker.listeners["SECURE"],
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": USER,
            "sasl.password": PASSWORD,
            "ssl.ca.location": str(ca.ca_pem),
        }
    )

    def authenticates() -> bool:
        try:
            secure_admin.list_topics(timeout=5)
        except KafkaException:
            return False
        return True

    # The credential reaches the broker's metadata cache a moment after the controller took it.
    wait_until(authenticates, 60, "the SCRAM user to authenticate on the SASL_SSL listener")
    yield Secured(broker, ca)
    broker.close()


@pytest.fixture
def start(secured: Secured, tmp_path: Path) -> Iterator[StartSidecar]:
    env = environment_for(secured.broker.bootstrap, f"_zdict_dictionaries-{uuid.uuid4().hex}")
    yield from start_sidecars(env, tmp_path)


def _proxy(
    start: StartSidecar, env: dict[str, str | None], listening: bool = True
) -> tuple[str, Sidecar]:
    return start_proxy(
        start, "forward", env={**allowed("zdict-it-fwd-*"), **env}, listening=listening
    )


def _round_trip(address: str, topic: str, n: int) -> tuple[list[Any], list[Any]]:
    """(what was sent, what a consumer group read), through the proxy at `address`."""
    sent: list[tuple[int, bytes, bytes, list[tuple[str, str | bytes | None]]]] = [
        (i % 2, f"key-{i % 5}".encode(), event(i, "secured"), [("seq", str(i).encode())])
        for i in range(n)
    ]
    errors: list[str] = []
    producer = Producer({"bootstrap.servers": address, "enable.idempotence": True})
    for partition, key, value, headers in sent:
        producer.produce(
            topic,
            value=value,
            key=key,
            headers=headers,
            partition=partition,
            on_delivery=lambda err, _msg: errors.append(str(err)) if err else None,
        )
    assert producer.flush(CLIENT_TIMEOUT) == 0 and errors == []
    consumer = Consumer(
        {
            "bootstrap.servers": address,
            "group.id": f"zdict-it-forward-secured-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    got: list[Any] = []
    deadline = time.monotonic() + CLIENT_TIMEOUT
    try:
        while len(got) < n and time.monotonic() < deadline:
            for m in consumer.consume(500, 0.5):
                assert m.error() is None, m.error()
                got.append((m.partition(), m.key(), m.value(), headers_of(m)))
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return sorted(sent), sorted(got)


@pytest.mark.parametrize(
    ("listener", "protocol", "mechanism"),
    [
        ("SECURE", "SASL_SSL", "SCRAM-SHA-512"),
        ("SASLPLAIN", "SASL_PLAINTEXT", "PLAIN"),
        ("TLS", "SSL", None),
    ],
)
def test_a_producer_and_a_consumer_group_through_the_proxy_to_a_secured_upstream(
    secured: Secured, start: StartSidecar, listener: str, protocol: str, mechanism: str | None
) -> None:
    topic = create_topic(secured.broker.admin(), 2, None, f"zdict-it-fwd-{listener.lower()}")
    address, proxy = _proxy(start, secured.env(listener))
    started = time.monotonic()
    sent, got = _round_trip(address, topic, 300)
    seconds = time.monotonic() - started
    (checked,) = proxy.events("upstream_checked")
    print(
        f"\n{protocol}{'/' + mechanism if mechanism else ''} upstream: {len(got)} of "
        f"{len(sent)} records produced and read by a consumer group through the proxy in "
        f"{seconds:.1f} s"
    )
    assert got == sent, "byte-exact: partition, key, value, headers"
    assert checked["security_protocol"] == protocol
    assert checked["sasl_mechanism"] == mechanism
    assert checked["upstream"] == secured.broker.listeners[listener]
    assert proxy.stop() == 0, proxy.tail()
    log = proxy.log_text()
    assert PASSWORD not in log
    assert not [
        e
        for e in proxy.log_lines()
        if e.get("event") in ("upstream_auth_failed", "upstream_unreachable", "request_refused")
    ]


def test_a_wrong_password_stops_the_proxy_at_start_with_the_brokers_message(
    secured: Secured, start: StartSidecar
) -> None:
    started = time.monotonic()
    _, proxy = _proxy(start, secured.env("SECURE", WRONG_PASSWORD), listening=False)
    code = proxy.wait(timeout=90)
    seconds = time.monotonic() - started
    failures = proxy.events("proxy_failed")
    print(
        f"\nwrong SCRAM password: proxy exited {code} after {seconds:.1f} s: "
        f"{failures[0]['error'] if failures else proxy.tail()}"
    )
    assert code == 1, proxy.tail()
    assert len(failures) == 1
    assert failures[0]["error"].startswith(secured.broker.listeners["SECURE"])
    assert REFUSED in failures[0]["error"]
    assert "SASL_AUTHENTICATION_FAILED" in failures[0]["error"]
    assert proxy.events("proxy_listening") == []
    assert WRONG_PASSWORD not in proxy.log_text() and PASSWORD not in proxy.log_text()


def test_a_client_configured_with_sasl_against_the_proxy_is_refused_clearly(
    secured: Secured, start: StartSidecar
) -> None:
    address, proxy = _proxy(start, secured.env("SASLPLAIN"))
    logger = logging.getLogger(f"zdict-it-sasl-client-{uuid.uuid4().hex}")
    lines = Lines()
    logger.addHandler(lines)
    logger.propagate = False
    producer = Producer(
        {
            "bootstrap.servers": address,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": USER,
            "sasl.password": PASSWORD,
            "logger": logger,
        }
    )
    with pytest.raises(KafkaException):
        producer.list_topics(timeout=5)
    producer.poll(1)  # serves the client's log lines
    refused = proxy.wait_for_event("client_sasl_refused", timeout=30)
    said = [line for line in lines.messages if "SASL" in line]
    print(f"\na SASL client through the proxy: {said[0] if said else lines.messages[:3]}")
    assert any(
        "Unsupported SASL mechanism: broker's supported mechanisms: " in line for line in said
    ), lines.messages[:10]
    assert refused["api"] == "SaslHandshake" and refused["mechanism"] == "PLAIN"
    assert "security.protocol=PLAINTEXT and no sasl.* settings" in refused["error"]
    assert proxy.stop() == 0, proxy.tail()
    # The client retried every few milliseconds; the proxy's line is throttled (10 s).
    assert len(proxy.events("client_sasl_refused")) <= 2
