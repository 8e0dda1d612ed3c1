"""The ACLs deploy/README.md lists per role, against a broker that enforces them.

A private broker runs KRaft's StandardAuthorizer with a SASL_PLAINTEXT listener (PLAIN, one user
per role) next to its PLAINTEXT one, whose anonymous principal is the super user the test sets
up and checks with. Each role's grants are `deploy.acls`' (what `python -m deploy.acls` prints
for operators), applied with Kafka's own AclCommand from the broker's jars; then the role runs as
a real process, configured only through ``ZDICT_KAFKA__*``, with nothing more: the trainer
publishes a dictionary; the relay consumes, compresses with it from the registry, produces and
commits; the proxy serves a producer and a consumer group with it; the operator
retires a dictionary (`--with write --with retire`). One thing outside each role's grants is
refused with a message naming the authorization. Figures are printed (run
with ``-s``).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]  # public, not in __all__

from deploy.acls import DEFAULT_REGISTRY, INDEX_SUFFIX, acl_arguments
from sidecar.codec import Decoder
from sidecar.config import KafkaSettings, RegistrySettings, Settings
from sidecar.dictionaries.model import with_new_id
from sidecar.dictionaries.registry import Registry, RegistryResolver

from .launch import StartSidecar, environment_for, start_sidecars
from .private_broker import KAFKA_LOCAL, KAFKA_LOCAL_TIMEOUT_S, PrivateBroker, StartPrivateBroker
from .probe import KafkaProbe
from .process import Sidecar, free_port
from .registry_dictionaries import dictionaries
from .upstream_records import event, headers_of, read_all
from .waiting import wait_until

#: One SASL user per role, each with its own password (PLAIN: the broker's JAAS line holds them).
USERS = {
    "trainer": "Pw-trainer-4e1b",
    "relay": "Pw-relay-9c2d",
    "proxy": "Pw-proxy-77a0",
    "operator": "Pw-operator-3f6a",
}
PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule required {};".format(
    " ".join(f'user_{user}="{password}"' for user, password in USERS.items())
)
RECORDS = 2_000
#: Records a client produces and reads back through the proxy.
THROUGH_PROXY = 500
#: Seconds a role may take to do its job on this loaded machine.
ROLE_TIMEOUT = 90.0
#: What the roles are refused: a topic that exists, with no ACL for any of them.
SECRET = "secret-payroll"


@dataclass(frozen=True)
class Authorizing:
    """The broker, and how each role reaches it."""

    broker: PrivateBroker

    def topic(self, name: str, partitions: int) -> str:
        """Create `name` as the super user; the name."""
        admin = self.broker.admin()  # referenced until its futures are done
        for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
            future.result(timeout=60)
        return name

    def grant(
        self,
        role: str,
        user: str,
        values: Mapping[str, Sequence[str]],
        conditions: Sequence[str] = (),
    ) -> list[list[str]]:
        """Apply `role`'s grants (of its conditional ones, those of `conditions`) to
        User:`user` with AclCommand, as an operator would; the AclCommand arguments applied."""
        applied = acl_arguments(role, f"User:{user}", values, conditions)
        for arguments in applied:
            result = subprocess.run(
                [
                    sys.executable,
                    str(KAFKA_LOCAL),
                    "--home",
                    str(self.broker.home),
                    "tools",
                    "acls",
                    "--bootstrap-server",
                    self.broker.bootstrap,
                    *arguments,
                ],
                capture_output=True,
                text=True,
                stdin=subprocess.DEVNULL,
                timeout=KAFKA_LOCAL_TIMEOUT_S,
                check=False,
            )
            assert result.returncode == 0, f"AclCommand {arguments}:\n{result.stderr}"
        return applied

    def env(self, user: str) -> dict[str, str | None]:
        """A role's settings: the SASL listener as `user`, librdkafka names under ZDICT_KAFKA__."""
        return {
            "KAFKA_BOOTSTRAP_SERVERS": None,
            "ZDICT_KAFKA__BOOTSTRAP_SERVERS": self.broker.listeners["ROLES"],
            "ZDICT_KAFKA__SECURITY_PROTOCOL": "SASL_PLAINTEXT",
            "ZDICT_KAFKA__SASL_MECHANISM": "PLAIN",
            "ZDICT_KAFKA__SASL_USERNAME": user,
            "ZDICT_KAFKA__SASL_PASSWORD": USERS[user],
            "ZDICT_TRAINING__ENABLED": "false",
        }


@pytest.fixture(scope="module")
def authorizing(private_broker: StartPrivateBroker) -> Iterator[Authorizing]:
    broker = private_broker(
        "acls",
        listeners=["ROLES:SASL_PLAINTEXT"],
        properties={
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            # The PLAINTEXT and controller listeners: the broker itself and the test's admin.
            "super.users": "User:ANONYMOUS",
            "allow.everyone.if.no.acl.found": "false",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.roles.plain.sasl.jaas.config": PLAIN,
        },
    )
    admin = broker.admin()  # referenced until its futures are done: a dropped client aborts them
    # Created beforehand, as deploy/README.md says: no role needs Create.
    registry = [
        NewTopic(name, 1, 1, config={"cleanup.policy": "compact"})
        for name in (DEFAULT_REGISTRY, DEFAULT_REGISTRY + INDEX_SUFFIX)
    ]
    for future in admin.create_topics(registry).values():
        future.result(timeout=60)
    found = Authorizing(broker)
    found.topic(SECRET, 1)
    yield found
    broker.close()


@dataclass(frozen=True)
class Events:
    """A topic of events the trainer may sample (its grants applied once for the module)."""

    topic: str
    values: list[bytes]
    grants: int


@pytest.fixture(scope="module")
def events(authorizing: Authorizing) -> Events:
    topic = authorizing.topic(f"events-{uuid.uuid4().hex[:8]}", 2)
    values = _produce(authorizing.broker.bootstrap, topic, RECORDS)
    grants = authorizing.grant("trainer", "trainer", {"input": [topic]})
    return Events(topic, values, len(grants))


@pytest.fixture
def start(authorizing: Authorizing, tmp_path: Path) -> Iterator[StartSidecar]:
    env = environment_for(authorizing.broker.bootstrap, DEFAULT_REGISTRY)
    yield from start_sidecars(env, tmp_path)


def _produce(bootstrap: str, topic: str, n: int) -> list[bytes]:
    values = [event(i, topic) for i in range(n)]
    producer = Producer({"bootstrap.servers": bootstrap})
    for i, value in enumerate(values):
        producer.produce(topic, value, key=str(i).encode())
    assert producer.flush(60) == 0
    return values


def _train(authorizing: Authorizing, start: StartSidecar, topic: str, namespace: str) -> Sidecar:
    """`train --topic --publish` as User:trainer, run to its end."""
    trainer = start(
        "train",
        "--topic",
        topic,
        "--namespace",
        namespace,
        "--publish",
        "--sample",
        str(RECORDS),
        env=authorizing.env("trainer"),
        name=f"train-{namespace}",
    )
    trainer.wait(timeout=ROLE_TIMEOUT)
    return trainer


def _published(trainer: Sidecar) -> int:
    """The id of the dictionary the trainer published."""
    text = trainer.log_text()
    found = re.search(r"dictionary (\d+) \(version \d+\) activated", text)
    assert trainer.proc.returncode == 0 and found, text
    assert f"published to registry topic {DEFAULT_REGISTRY}" in text, text
    return int(found[1])


def _decoded(bootstrap: str, stored: list[Message]) -> list[bytes]:
    """The values as produced, decoded with the registry only (read as the super user)."""
    decoder = Decoder(RegistryResolver.connect(bootstrap, topic=DEFAULT_REGISTRY))
    try:
        return sorted(decoder.decode(m.value(), headers_of(m)) or b"" for m in stored)
    finally:
        decoder.close()


def _refusal(process: Sidecar) -> str:
    """The message a role exited with: its `relay_failed`/`proxy_failed` event's error, or the
    CLI's `error:` line."""
    code = process.wait(timeout=ROLE_TIMEOUT)
    assert code != 0, process.tail()
    text = process.log_text()
    assert "Traceback" not in text, text
    failed = [e["error"] for e in process.log_lines() if e.get("event") == "relay_failed"]
    return failed[0] if failed else text


def test_the_trainer_publishes_and_the_relay_relays_with_only_their_acls(
    authorizing: Authorizing, events: Events, start: StartSidecar
) -> None:
    broker = authorizing.broker
    output = authorizing.topic(f"{events.topic}.zd", 2)
    group = f"relay-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    grants = authorizing.grant(
        "relay", "relay", {"input": [events.topic], "output": [output], "group": [group]}
    )
    granted = time.monotonic() - started

    dict_id = _published(_train(authorizing, start, events.topic, events.topic))
    relay_env = {
        **authorizing.env("relay"),
        "ZDICT_RELAY__INPUT_TOPICS": json.dumps([events.topic]),
        "ZDICT_RELAY__GROUP_ID": group,
    }
    relay = start("run", env=relay_env, name="relay")
    probe = KafkaProbe(broker.bootstrap, broker.admin())
    try:
        wait_until(
            lambda: probe.count(output) == RECORDS and probe.caught_up(group, events.topic),
            ROLE_TIMEOUT,
            f"the relay to deliver {RECORDS} records and commit them",
        )
    finally:
        probe.close()
    seconds = time.monotonic() - started - granted
    assert relay.stop() == 0, relay.tail()
    assert [e["dict_id"] for e in relay.events("dictionary_loaded")] == [dict_id]
    stored = read_all(broker.bootstrap, output, RECORDS)
    assert all(dict(headers_of(m)).get("zd") for m in stored), "every record compressed"
    assert _decoded(broker.bootstrap, stored) == sorted(events.values)

    # Outside its grants: an input topic the relay may not describe.
    refused = start(
        "run", env={**relay_env, "ZDICT_RELAY__INPUT_TOPICS": json.dumps([SECRET])}, name="refused"
    )
    message = _refusal(refused)
    assert f"refuses to describe topic(s) {SECRET}" in message
    assert "TOPIC_AUTHORIZATION_FAILED" in message and "Describe ACL" in message
    print(
        f"\n{events.grants} + {len(grants)} AclCommand grants for trainer and relay, the relay's "
        f"in {granted:.1f} s; then as "
        f"User:trainer and User:relay: dictionary {dict_id} trained and published, {RECORDS} "
        f"records relayed with it and committed in {seconds:.1f} s; outside: {message}"
    )


def test_the_trainer_is_refused_a_topic_outside_its_acls(
    authorizing: Authorizing, start: StartSidecar
) -> None:
    trainer = _train(authorizing, start, SECRET, "payroll")
    message = _refusal(trainer)
    assert f"error: the cluster at bootstrap.servers={authorizing.broker.listeners['ROLES']}" in (
        message
    )
    assert f"refuses to describe topic(s) {SECRET} to this client" in message


def test_the_operator_retires_a_dictionary_with_its_write_and_retire_acls(
    authorizing: Authorizing, start: StartSidecar
) -> None:
    broker = authorizing.broker
    namespace = f"retire-{uuid.uuid4().hex[:8]}"
    topic = authorizing.topic(namespace, 1)  # empty: no record names the old dictionary
    settings = Settings(
        kafka=KafkaSettings.model_validate({"bootstrap.servers": broker.bootstrap}),
        registry=RegistrySettings(topic=DEFAULT_REGISTRY, create=False),
    )
    writer = Registry.open(settings, "test")  # as the super user
    try:
        # Each under a free id (the module's other roles took some), so their bytes differ.
        first, second = dictionaries(2, namespace)
        old = writer.publish_dictionary(with_new_id(first, writer.state.next_id()))
        current = writer.publish_dictionary(with_new_id(second, writer.state.next_id()))
        writer.publish_activation(namespace, current.id, "promote")
    finally:
        writer.close()
    grants = authorizing.grant("operator", "operator", {"topic": [topic]}, ("write", "retire"))
    bounds = ("--older-than-days", "0", "--margin-hours", "0", "--apply")
    retire = start(
        "dicts", "retire", "--topic", topic, *bounds, env=authorizing.env("operator"), name="retire"
    )
    assert retire.wait(timeout=ROLE_TIMEOUT) == 0, retire.tail()
    text = retire.log_text()
    assert re.search(rf"{old.id} +{namespace} .* retired ", text), text
    assert "retired 1 of" in text, text

    # Outside its grants: a topic whose retention it may not read.
    refused = start(
        "dicts",
        "retire",
        "--topic",
        f"{namespace}={SECRET}",
        *bounds,
        env=authorizing.env("operator"),
        name="retire-refused",
    )
    message = _refusal(refused)
    assert f"cannot read the settings of {SECRET}" in message, message
    print(f"\n{len(grants)} AclCommand grants for the operator; as User:operator: {text}")


def _through(address: str, topic: str, group: str) -> tuple[list[bytes], list[bytes]]:
    """(produced, read by `group`), through the proxy at `address`."""
    sent = [event(i, "acl-proxy") for i in range(THROUGH_PROXY)]
    errors: list[str] = []
    producer = Producer({"bootstrap.servers": address, "enable.idempotence": True})
    for value in sent:
        producer.produce(
            topic, value, on_delivery=lambda err, _m: errors.append(str(err)) if err else None
        )
    assert producer.flush(ROLE_TIMEOUT) == 0 and errors == []
    consumer = Consumer(
        {"bootstrap.servers": address, "group.id": group, "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + ROLE_TIMEOUT
    try:
        while len(got) < len(sent) and time.monotonic() < deadline:
            for m in consumer.consume(500, 0.5):
                assert m.error() is None, m.error()
                got.append(m.value() or b"")
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return sorted(sent), sorted(got)


def _refused_produce(address: str, topic: str) -> KafkaError:
    errors: list[KafkaError | None] = []
    producer = Producer({"bootstrap.servers": address, "message.timeout.ms": 20_000})
    producer.produce(topic, b"{}", on_delivery=lambda err, _m: errors.append(err))
    producer.flush(30)
    (error,) = errors
    assert error is not None, "delivered outside the proxy's grants"
    return error


def test_the_forwarding_proxy_serves_a_producer_and_a_consumer_group_with_only_its_acls(
    authorizing: Authorizing, events: Events, start: StartSidecar
) -> None:
    broker = authorizing.broker
    clicks = authorizing.topic(f"clicks-{uuid.uuid4().hex[:8]}", 2)
    readers = f"readers-{uuid.uuid4().hex[:8]}"
    dict_id = _published(_train(authorizing, start, events.topic, clicks))
    started = time.monotonic()
    grants = authorizing.grant("proxy", "proxy", {"topic": [clicks], "client_group": [readers]})
    granted = time.monotonic() - started

    address = f"127.0.0.1:{free_port()}"
    proxy = start(
        "proxy",
        "--no-training",
        "--listen",
        address,
        "--metrics-port",
        "0",
        "--topic",
        clicks,
        env={
            **authorizing.env("proxy"),
            "ZDICT_PROXY__ALLOWED_TOPICS": json.dumps([clicks, SECRET]),
            # Node 1 (kafka-local's broker) at the next free port.
            "ZDICT_PROXY__BROKER_PORT_BASE": str(free_port() - 1),
        },
        name="proxy",
    )
    proxy.wait_for_event("proxy_listening", timeout=ROLE_TIMEOUT)
    sent, got = _through(address, clicks, readers)
    seconds = time.monotonic() - started - granted
    assert got == sent, "read back through the proxy, decoded"
    stored = read_all(broker.bootstrap, clicks, THROUGH_PROXY)
    assert all(dict(headers_of(m)).get("zd") for m in stored), "the broker holds frames"
    assert _decoded(broker.bootstrap, stored) == sent
    assert [e["dict_id"] for e in proxy.events("dictionary_loaded")] == [dict_id]

    # Outside its grants: a topic its allow-list admits but the broker does not grant it.
    error = _refused_produce(address, SECRET)
    assert error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, error
    assert proxy.stop() == 0, proxy.tail()
    print(
        f"\n{len(grants)} AclCommand grants for the proxy in {granted:.1f} s; as User:proxy, "
        f"{THROUGH_PROXY} records produced and read by a consumer group through it, compressed "
        f"with dictionary {dict_id} from the registry, in {seconds:.1f} s; outside: {error.str()}"
    )
