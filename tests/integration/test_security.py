"""Security pass-through on a real broker: SASL_SSL with SCRAM-SHA-512 and a CA made here.

A private broker (``kafka-local --home``) gets two SASL_SSL listeners next to its PLAINTEXT one:
SECURE, whose certificate names 127.0.0.1, and WRONGHOST, whose certificate (signed by the same
CA) names another host. The SCRAM user is created through the AdminClient on the PLAINTEXT
listener. The sidecar runs as a real process configured only through ``ZDICT_KAFKA__*``
variables, as an operator would configure it. Figures are printed (run with ``-s``).
"""

from __future__ import annotations

import json
import socket
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # public, but not in __all__
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from tests.pki import CertificateAuthority

from .launch import RunCli, StartSidecar
from .private_broker import PrivateBroker, StartPrivateBroker
from .probe import KafkaProbe
from .records import Outgoing, ProduceRecords
from .topics import create_topic
from .waiting import wait_until

USER = "zdict-relay"
#: Distinctive, so a leak shows up in any text it reaches.
PASSWORD = "Pw-3c7f1a9e-never-log-me"
WRONG_PASSWORD = "Pw-wrong-58d2b6-never-log-me-either"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
#: Markers carried by every relayed record: /metrics must never show them.
KEY_MARKER = "kmark-61c0d2"
VALUE_MARKER = "vmark-a94e7b"


@dataclass(frozen=True)
class SecureCluster:
    broker: PrivateBroker
    ca: CertificateAuthority

    @property
    def secure(self) -> str:
        return self.broker.listeners["SECURE"]

    @property
    def wrong_host(self) -> str:
        return self.broker.listeners["WRONGHOST"]

    def client_env(self, address: str, password: str = PASSWORD) -> dict[str, str | None]:
        """The sidecar's settings for `address`, as an operator sets them: librdkafka names
        under ZDICT_KAFKA__ (the registry and the CLI use the same ones)."""
        return {
            "KAFKA_BOOTSTRAP_SERVERS": None,
            "ZDICT_KAFKA__BOOTSTRAP_SERVERS": address,
            "ZDICT_KAFKA__SECURITY_PROTOCOL": "SASL_SSL",
            "ZDICT_KAFKA__SASL_MECHANISM": "SCRAM-SHA-512",
            "ZDICT_KAFKA__SASL_USERNAME": USER,
            "ZDICT_KAFKA__SASL_PASSWORD": password,
            "ZDICT_KAFKA__SSL_CA_LOCATION": str(self.ca.ca_pem),
            "ZDICT_TRAINING__ENABLED": "false",
        }

    def client_config(self, address: str, **extra: str) -> dict[str, str | int | float | bool]:
        return {
            "bootstrap.servers": address,
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": USER,
            "sasl.password": PASSWORD,
            "ssl.ca.location": str(self.ca.ca_pem),
            **extra,
        }


def _listener(name: str, keystore: Path) -> dict[str, str]:
    prefix = f"listener.name.{name.lower()}"
    return {
        f"{prefix}.scram-sha-512.sasl.jaas.config": SCRAM,
        f"{prefix}.ssl.keystore.type": "PEM",
        f"{prefix}.ssl.keystore.location": str(keystore),
    }


@pytest.fixture(scope="module")
def cluster(
    private_broker: StartPrivateBroker, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SecureCluster]:
    ca = CertificateAuthority.create(tmp_path_factory.mktemp("pki"))
    properties = {
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        **_listener("SECURE", ca.issue("secure", ["127.0.0.1", "localhost"])),
        **_listener("WRONGHOST", ca.issue("wronghost", ["broker.wrong-host.invalid"])),
    }
    broker = private_broker(
        "security", listeners=["SECURE:SASL_SSL", "WRONGHOST:SASL_SSL"], properties=properties
    )
    upsert = UserScramCredentialUpsertion(
        USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), PASSWORD.encode()
    )
    admin = broker.admin()  # referenced until its futures are done: a dropped client aborts them
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(timeout=30)
    found = SecureCluster(broker, ca)
    # The credential reaches the broker's metadata cache a moment after the controller took it.
    secure_admin = AdminClient(found.client_config(found.secure))

    def authenticates() -> bool:
        try:
            secure_admin.list_topics(timeout=5)
        except KafkaException:
            return False
        return True

    wait_until(authenticates, 60, "the SCRAM user to authenticate on the SASL_SSL listener")
    yield found
    broker.close()


def test_the_relay_over_sasl_ssl_relays_everything_and_metrics_carry_no_payload_key_or_secret(
    cluster: SecureCluster,
    sidecar: StartSidecar,
    cli: RunCli,
    produce_records: ProduceRecords,
    tmp_path: Path,
) -> None:
    n = 5_000
    broker = cluster.broker
    topic = create_topic(broker.admin(), partitions=2, name_prefix="zdict-it-sasl")
    records = [
        Outgoing(
            key=f"{KEY_MARKER}-{i % 50:03d}".encode(),
            value=json.dumps({"seq": i, "note": f"{VALUE_MARKER} record {i}"}).encode(),
        )
        for i in range(n)
    ]
    produce_records(topic, records, bootstrap=broker.bootstrap)
    group = f"zdict-it-sasl-{uuid.uuid4().hex[:8]}"
    env = cluster.client_env(cluster.secure)
    proc = sidecar(
        *("run", "--input-topic", topic, "--create-topics", "--group-id", group),
        *("--dictionaries", str(tmp_path / "store")),
        env=env,
    )
    probe = KafkaProbe(broker.bootstrap, broker.admin())
    try:
        proc.wait_for_event("partitions_assigned", timeout=90)
        wait_until(lambda: probe.caught_up(group, topic), 120, "the relay to commit every record")
    finally:
        probe.close()
    status, body = proc.http_get("/metrics")
    exposition = body.decode()
    relayed = sum(
        value
        for (name, labels), value in proc.metrics().items()
        if name == "zdict_records_total" and ("topic", topic) in labels
    )
    assert proc.stop() == 0, proc.tail()

    verified = cli("verify", "--input", topic, "--json", env=env, timeout=180)
    report = json.loads(verified.stdout)
    print(
        f"\nSASL_SSL/SCRAM-SHA-512: {n:,} records relayed over TLS, metrics counted "
        f"{relayed:,.0f}; verify over SASL_SSL: {report['outputs']:,} output records, lost "
        f"{report['lost']}, duplicated {report['duplicated']}; /metrics {len(exposition):,} "
        "bytes without a key, value or secret"
    )
    assert verified.returncode == 0, verified.stdout.decode() + verified.stderr.decode()
    assert (report["inputs"], report["lost"], report["corrupted"]) == (n, 0, 0)
    assert status == 200 and relayed == n
    for secret in (KEY_MARKER, VALUE_MARKER, PASSWORD):
        assert secret not in exposition, f"{secret} leaked into /metrics"
    for text in (proc.log_text(), verified.stdout.decode(), verified.stderr.decode()):
        assert PASSWORD not in text
    assert proc.events("relay_configured")[0]["kafka"]["sasl.password"] == "***"


def test_a_wrong_password_fails_fast_naming_the_authentication_failure_and_never_shows_it(
    cluster: SecureCluster, sidecar: StartSidecar, cli: RunCli
) -> None:
    topic = create_topic(cluster.broker.admin(), name_prefix="zdict-it-sasl-wrong")
    # A long availability timeout: a refusal must not wait for it (the old behaviour did).
    env = cluster.client_env(cluster.secure, WRONG_PASSWORD) | {
        "ZDICT_RELAY__UNREACHABLE_TIMEOUT": "120"
    }
    started = time.monotonic()
    proc = sidecar("run", "--input-topic", topic, "--create-topics", env=env)
    code = proc.wait(timeout=120)
    run_seconds = time.monotonic() - started
    started = time.monotonic()
    verified = cli("verify", "--input", topic, env=env, timeout=120)
    verify_seconds = time.monotonic() - started

    failures = proc.events("relay_failed")
    print(
        f"\nwrong SCRAM password: `run` exited {code} after {run_seconds:.1f} s, `verify` exited "
        f"{verified.returncode} after {verify_seconds:.1f} s (both including the interpreter's "
        f"start); relay_failed: {failures[0]['error'] if failures else None}"
    )
    assert code == 1, proc.tail()
    assert len(failures) == 1
    assert "refused the connection, authentication failed" in failures[0]["error"]
    assert "SASL authentication error" in failures[0]["error"]
    assert verified.returncode == 1
    assert "authentication failed" in verified.stderr.decode()
    # Fast: the first metadata request hears the refusal (was: the 30 s metadata timeout).
    assert run_seconds < 20 and verify_seconds < 20
    for text in (proc.log_text(), verified.stdout.decode(), verified.stderr.decode()):
        assert WRONG_PASSWORD not in text and PASSWORD not in text


def test_a_broker_certificate_naming_another_host_is_refused_with_default_settings(
    cluster: SecureCluster, sidecar: StartSidecar
) -> None:
    topic = create_topic(cluster.broker.admin(), name_prefix="zdict-it-tls-host")
    env = cluster.client_env(cluster.wrong_host)
    started = time.monotonic()
    proc = sidecar("run", "--input-topic", topic, "--create-topics", env=env)
    code = proc.wait(timeout=120)
    seconds = time.monotonic() - started
    failures = proc.events("relay_failed")
    # The control: the same listener, CA and credentials, with hostname verification switched
    # off, is accepted. So what refused the connection is the name in the certificate.
    unchecked = AdminClient(
        cluster.client_config(
            cluster.wrong_host, **{"ssl.endpoint.identification.algorithm": "none"}
        )
    )
    topics = unchecked.list_topics(timeout=30).topics
    print(
        f"\ncertificate for broker.wrong-host.invalid at {cluster.wrong_host}: `run` exited "
        f"{code} after {seconds:.1f} s; with ssl.endpoint.identification.algorithm=none the same "
        f"listener answers ({len(topics)} topics)"
    )
    assert code == 1, proc.tail()
    assert len(failures) == 1
    assert "the TLS handshake failed" in failures[0]["error"]
    assert "certificate verify failed" in failures[0]["error"]
    assert topic in topics
    assert PASSWORD not in proc.log_text()


def test_the_metrics_endpoint_listens_only_on_the_configured_address(
    cluster: SecureCluster, sidecar: StartSidecar
) -> None:
    topic = create_topic(cluster.broker.admin(), name_prefix="zdict-it-metrics-bind")
    # 127.0.0.2 is loopback too, but another address: what binding to a pod IP looks like.
    env = cluster.client_env(cluster.secure) | {"ZDICT_METRICS__HOST": "127.0.0.2"}
    proc = sidecar("run", "--input-topic", topic, "--create-topics", env=env)
    listening = proc.wait_for_event("metrics_listening", timeout=60)
    proc.wait_for_event("partitions_assigned", timeout=90)
    port = proc.metrics_port
    assert port is not None
    with urllib.request.urlopen(f"http://127.0.0.2:{port}/metrics", timeout=10) as response:
        status, body = response.status, response.read().decode()
    with (
        pytest.raises(ConnectionRefusedError),
        socket.create_connection(("127.0.0.1", port), timeout=10),
    ):
        pass
    assert proc.stop() == 0, proc.tail()
    print(f"\nmetrics on {listening['url']}: 200 there, connection refused on 127.0.0.1:{port}")
    assert listening["url"] == f"http://127.0.0.2:{port}/metrics"
    assert status == 200 and "zdict_build_info" in body
    assert PASSWORD not in body
