"""Fixtures for integration tests against a real Kafka broker.

The broker is started outside pytest by ``deploy/kafka/kafka-local``: ``make test`` runs
``deploy/kafka/kafka-local exec -- .venv/bin/pytest ...``, which exports KAFKA_BOOTSTRAP_SERVERS.
Without a reachable broker the integration tests FAIL; they are never skipped. No mocks.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
import uuid
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient

from .broker import BOOTSTRAP_ENV, BROKER_TIMEOUT_S, HOW_TO_RUN, TOPIC_TIMEOUT_S
from .launch import RunCli, SidecarEnv, StartSidecar, environment_for, start_sidecars
from .private_broker import PrivateBroker, StartPrivateBroker
from .probe import KafkaProbe
from .records import ConsumeAll, Outgoing, ProduceEvents, ProduceRecords, Record
from .topics import MakeTopic, create_topic

_HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test collected under tests/integration with ``pytest.mark.integration``.

    The hook sees all collected items of the session, so it filters by path.
    """
    for item in items:
        if Path(item.path).resolve().is_relative_to(_HERE):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    """Bootstrap address of the real test broker, from $KAFKA_BOOTSTRAP_SERVERS.

    Fails (never skips) when the variable is unset or the broker does not answer within ~15 s.
    """
    bootstrap = os.environ.get(BOOTSTRAP_ENV, "").strip()
    if not bootstrap:
        pytest.fail(f"{BOOTSTRAP_ENV} is not set: {HOW_TO_RUN}", pytrace=False)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        metadata = admin.list_topics(timeout=BROKER_TIMEOUT_S)
    except KafkaException as exc:
        pytest.fail(
            f"no Kafka broker answers at {BOOTSTRAP_ENV}={bootstrap} within "
            f"{BROKER_TIMEOUT_S:.0f}s ({exc.args[0]}): {HOW_TO_RUN}",
            pytrace=False,
        )
    if not metadata.brokers:
        pytest.fail(f"Kafka at {bootstrap} reports no brokers: {HOW_TO_RUN}", pytrace=False)
    return bootstrap


@pytest.fixture(scope="session")
def kafka_admin(kafka_bootstrap: str) -> AdminClient:
    """A session-wide AdminClient connected to the test broker."""
    return AdminClient({"bootstrap.servers": kafka_bootstrap})


@pytest.fixture(scope="session")
def make_topic(kafka_admin: AdminClient) -> Iterator[MakeTopic]:
    """Factory creating uniquely named topics on the real broker (deleted at session end).

    ``make_topic(partitions=1, config=None, name_prefix="zdict-it")`` creates
    ``<prefix>-<uuid4 hex>`` with replication factor 1 and the given topic ``config``, waits for
    the CreateTopics result and for every partition to have a leader, and returns the name.
    Session-scoped, so fixtures of any scope can use it.
    """
    created: list[str] = []

    def factory(
        partitions: int = 1,
        config: Mapping[str, str] | None = None,
        name_prefix: str = "zdict-it",
    ) -> str:
        name = create_topic(kafka_admin, partitions, config, name_prefix)
        created.append(name)
        return name

    yield factory

    if not created:
        return
    try:  # best effort: the broker's data dir is throwaway anyway
        futures = kafka_admin.delete_topics(created, operation_timeout=TOPIC_TIMEOUT_S)
        for name, fut in futures.items():
            try:
                fut.result(timeout=TOPIC_TIMEOUT_S)
            except Exception as exc:
                warnings.warn(f"could not delete test topic {name}: {exc}", stacklevel=1)
    except Exception as exc:
        warnings.warn(f"could not delete test topics {created}: {exc}", stacklevel=1)


@pytest.fixture(scope="session")
def produce_records(kafka_bootstrap: str) -> ProduceRecords:
    """Factory: produce `records` (acks=all, idempotent) and return them as delivered.

    The result is in input order, each with the partition and offset the broker gave it (the
    default partitioner places records by key). `rate` (records/s) throttles the producer, to
    keep a relay busy for a known time. `bootstrap` names another broker than the session's;
    `flush_timeout` is how long the last records may take (longer while a test keeps the broker
    down). Fails if any delivery fails.
    """

    def produce(
        topic: str,
        records: Iterable[Outgoing],
        rate: float | None = None,
        bootstrap: str | None = None,
        flush_timeout: float = 60.0,
    ) -> list[Record]:
        producer = Producer(
            {
                "bootstrap.servers": bootstrap or kafka_bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 10,
                "queue.buffering.max.messages": 1_000_000,
            }
        )
        specs = list(records)
        placed: list[tuple[int, int, int] | None] = [None] * len(specs)
        errors: list[str] = []

        def on_delivery(index: int) -> Callable[[KafkaError | None, Message], None]:
            def delivered(err: KafkaError | None, msg: Message) -> None:
                if err is not None:
                    errors.append(f"record {index}: {err.str()}")
                    return
                partition, offset = msg.partition(), msg.offset()
                assert partition is not None and offset is not None
                placed[index] = (partition, offset, msg.timestamp()[1])

            return delivered

        started = time.monotonic()
        for i, spec in enumerate(specs):
            if rate is not None and i % 100 == 0:
                ahead = started + i / rate - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)
            kwargs: dict[str, Any] = {
                "key": spec.key,
                "value": spec.value,
                "on_delivery": on_delivery(i),
            }
            if spec.headers:
                kwargs["headers"] = list(spec.headers)
            if spec.timestamp is not None:
                kwargs["timestamp"] = spec.timestamp
            while True:
                try:
                    producer.produce(topic, **kwargs)
                    break
                except BufferError:
                    producer.poll(0.05)
            if i % 1000 == 0:
                producer.poll(0)
        left = producer.flush(flush_timeout)
        assert left == 0, f"{left} records still undelivered after {flush_timeout:.0f} s"
        assert not errors, errors[:5]
        out: list[Record] = []
        for spec, where in zip(specs, placed, strict=True):
            assert where is not None
            partition, offset, timestamp = where
            out.append(
                Record(topic, partition, offset, spec.key, spec.value, spec.headers, timestamp)
            )
        return out

    return produce


@pytest.fixture(scope="session")
def produce_events(produce_records: ProduceRecords) -> ProduceEvents:
    """Factory: produce `n` generated events (`sidecar.bench.events`), keyed by ~`keys` user ids.

    Timestamps are explicit: one millisecond apart, ending about now (recent, so retention
    never deletes them: the relay keeps input timestamps on its output).
    """

    def produce(
        topic: str,
        n: int,
        *,
        seed: int = 1,
        kind: str = "product_viewed",
        keys: int = 200,
        rate: float | None = None,
        drift_at: int | None = None,
        bootstrap: str | None = None,
        flush_timeout: float = 60.0,
    ) -> list[Record]:
        from sidecar.bench.events import generate

        rng = random.Random(seed)
        start = int(time.time() * 1000) - n
        events = generate(kind, n, seed=seed, drift_at=drift_at)
        records = (
            Outgoing(key=b"user-%04d" % rng.randrange(keys), value=event, timestamp=start + i)
            for i, event in enumerate(events)
        )
        return produce_records(
            topic, records, rate=rate, bootstrap=bootstrap, flush_timeout=flush_timeout
        )

    return produce


@pytest.fixture(scope="session")
def consume_all(kafka_bootstrap: str) -> ConsumeAll:
    """Factory: read `topic` from the beginning with a fresh consumer group.

    Returns once `expected` records arrived or after `timeout` seconds with what arrived (the
    caller asserts the count), in arrival order (per partition: offset order).
    """

    def consume(topic: str, expected: int, timeout: float = 60.0) -> list[Record]:
        consumer = Consumer(
            {
                "bootstrap.servers": kafka_bootstrap,
                "group.id": f"zdict-it-read-{uuid.uuid4().hex}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "enable.partition.eof": False,
            }
        )
        received: list[Record] = []
        try:
            consumer.subscribe([topic])
            deadline = time.monotonic() + timeout
            while len(received) < expected and time.monotonic() < deadline:
                for msg in consumer.consume(num_messages=10_000, timeout=0.5):
                    if msg.error() is not None:
                        raise KafkaException(msg.error())
                    received.append(Record.from_message(msg))
        finally:
            consumer.close()
        return received

    return consume


@pytest.fixture(scope="session")
def kafka_probe(kafka_bootstrap: str, kafka_admin: AdminClient) -> Iterator[KafkaProbe]:
    probe = KafkaProbe(kafka_bootstrap, kafka_admin)
    yield probe
    probe.close()


@pytest.fixture
def registry_topic() -> str:
    """The test's own registry topic (its processes create it): tests never share dictionaries."""
    return f"_zdict_dictionaries-{uuid.uuid4().hex}"


@pytest.fixture
def sidecar_env(kafka_bootstrap: str, registry_topic: str) -> SidecarEnv:
    """`environment_for` this test's broker and registry topic."""
    return environment_for(kafka_bootstrap, registry_topic)


@pytest.fixture
def cli(sidecar_env: SidecarEnv, tmp_path: Path) -> RunCli:
    """Factory: run ``python -m sidecar *args`` to completion in `tmp_path`, output captured."""

    def run(
        *args: str, env: Mapping[str, str | None] | None = None, timeout: float = 120.0
    ) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [sys.executable, "-m", "sidecar", *args],
            env=sidecar_env(env),
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout,
            check=False,
        )

    return run


@pytest.fixture
def sidecar(sidecar_env: SidecarEnv, tmp_path: Path) -> Iterator[StartSidecar]:
    """Factory: start ``python -m sidecar *cli_args`` as a real process.

    The environment is `sidecar_env(env, bootstrap)`. `run` gets ``--metrics-port`` with a free
    port unless the arguments name one. The working directory is `tmp_path`; stdout and stderr
    go to ``tmp_path/<name>.log``, never to an unread pipe. Every process still running at the
    end of the test is killed.
    """
    yield from start_sidecars(sidecar_env, tmp_path)


@pytest.fixture(scope="module")
def module_sidecar(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StartSidecar]:
    """The `sidecar` factory for a set-up shared by a module's tests: processes live until the
    module's last test is done; they share a registry topic of the module's own."""
    env = environment_for(kafka_bootstrap, f"_zdict_dictionaries-{uuid.uuid4().hex}")
    yield from start_sidecars(env, tmp_path_factory.mktemp("sidecars"))


@pytest.fixture(scope="session")
def private_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StartPrivateBroker]:
    """Factory: a fresh broker of the caller's own, from ``deploy/kafka/kafka-local --home``.

    `listeners` adds listeners (``"SECURE:SASL_SSL"``) on free loopback ports; `properties`
    adds or replaces broker properties (SASL, TLS). Every broker started is stopped at the end
    of the session (a module may `close()` its own earlier). A broker that cannot start fails
    the test, with kafka-local's message and the broker log.
    """
    started: list[PrivateBroker] = []

    def start(
        name: str,
        listeners: Sequence[str] = (),
        properties: Mapping[str, str] | None = None,
    ) -> PrivateBroker:
        base = tmp_path_factory.mktemp(f"broker-{name}")
        home = base / "home"
        args = ["start"]
        for spec in listeners:
            args += ["--listener", spec]
        if properties:
            props = base / "extra.properties"
            props.write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
            args += ["--properties", str(props)]
        broker = PrivateBroker(name, home, "", {})
        result = broker._kafka_local(*args)
        started.append(broker)
        found = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
        broker.bootstrap = found[BOOTSTRAP_ENV]
        broker.listeners = {
            key.removeprefix("KAFKA_LOCAL_LISTENER_"): value
            for key, value in found.items()
            if key.startswith("KAFKA_LOCAL_LISTENER_")
        }
        return broker

    yield start

    for broker in started:
        broker.close()
