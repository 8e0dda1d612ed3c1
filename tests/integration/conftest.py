"""Fixtures for integration tests against a real Kafka broker.

The broker is started outside pytest by ``deploy/kafka/kafka-local``: ``make test`` runs
``deploy/kafka/kafka-local exec -- .venv/bin/pytest ...``, which exports KAFKA_BOOTSTRAP_SERVERS.
Without a reachable broker the integration tests FAIL; they are never skipped. No mocks.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # public, but not in __all__
    AdminClient,
    NewTopic,
)

from sidecar.codec import Decoder

BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP_SERVERS"
HOW_TO_RUN = (
    "run the integration tests via `make test` or "
    "`deploy/kafka/kafka-local exec -- .venv/bin/pytest tests/integration`"
)
BROKER_TIMEOUT_S = 15.0
TOPIC_TIMEOUT_S = 30.0

_HERE = Path(__file__).resolve().parent

MakeTopic = Callable[..., str]
"""``make_topic(partitions=1, config=None, name_prefix="zdict-it") -> str``"""


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


def _wait_topic_ready(admin: AdminClient, name: str, partitions: int) -> None:
    """Wait until the broker's metadata shows ``name`` with all ``partitions`` led."""
    deadline = time.monotonic() + TOPIC_TIMEOUT_S
    state = "not in metadata"
    while time.monotonic() < deadline:
        topic = admin.list_topics(topic=name, timeout=BROKER_TIMEOUT_S).topics.get(name)
        if topic is not None:
            if (
                topic.error is None
                and len(topic.partitions) == partitions
                and all(p.error is None and p.leader >= 0 for p in topic.partitions.values())
            ):
                return
            state = f"error={topic.error}, partitions={len(topic.partitions)}"
        time.sleep(0.1)
    raise AssertionError(f"topic {name} not ready after {TOPIC_TIMEOUT_S:.0f}s: {state}")


def create_topic(
    admin: AdminClient,
    partitions: int = 1,
    config: Mapping[str, str] | None = None,
    name_prefix: str = "zdict-it",
) -> str:
    """Create ``<prefix>-<uuid4 hex>`` (replication factor 1) and wait until every partition
    has a leader; its name."""
    prefix = re.sub(r"[^A-Za-z0-9._-]", "-", name_prefix)[:200]
    name = f"{prefix}-{uuid.uuid4().hex}"
    new_topic = NewTopic(
        name, num_partitions=partitions, replication_factor=1, config=dict(config or {})
    )
    futures = admin.create_topics(
        [new_topic], operation_timeout=TOPIC_TIMEOUT_S, request_timeout=TOPIC_TIMEOUT_S
    )
    futures[name].result(timeout=TOPIC_TIMEOUT_S + 5)  # raises KafkaException on failure
    _wait_topic_ready(admin, name, partitions)
    return name


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


# -- records, producing and consuming ------------------------------------------------------------

Headers = tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True, slots=True)
class Record:
    """One Kafka record as plain, comparable data: what was produced, or what was consumed."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    timestamp: int  # milliseconds (CreateTime)

    @classmethod
    def from_message(cls, msg: Message) -> Record:
        topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
        assert topic is not None and partition is not None and offset is not None
        return cls(
            topic=topic,
            partition=partition,
            offset=offset,
            key=msg.key(),
            value=msg.value(),
            headers=tuple(cast(Headers, msg.headers() or ())),
            timestamp=msg.timestamp()[1],
        )


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A record to produce; `timestamp` None lets the producer stamp it."""

    key: bytes | None
    value: bytes | None
    headers: Headers = ()
    timestamp: int | None = None


ProduceRecords = Callable[..., list[Record]]
"""``produce_records(topic, records: Iterable[Outgoing], rate=None, bootstrap=None,
flush_timeout=60.0) -> list[Record]``"""
ProduceEvents = Callable[..., list[Record]]
"""``produce_events(topic, n, *, seed=1, kind="product_viewed", keys=200, rate=None,
drift_at=None, bootstrap=None, flush_timeout=60.0)``"""
ConsumeAll = Callable[..., list[Record]]
"""``consume_all(topic, expected, timeout=60.0) -> list[Record]``"""


def wait_until(
    predicate: Callable[[], object], timeout: float, what: str, interval: float = 0.05
) -> None:
    """Poll `predicate` until it is true; fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


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


class KafkaProbe:
    """Cheap questions about topics and groups, for polling while a relay runs."""

    def __init__(self, bootstrap: str, admin: AdminClient) -> None:
        self.admin = admin
        self._consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": f"zdict-it-probe-{uuid.uuid4().hex}"}
        )

    def partitions(self, topic: str) -> list[int]:
        metadata = self.admin.list_topics(topic=topic, timeout=BROKER_TIMEOUT_S).topics[topic]
        return sorted(metadata.partitions)

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        """(low, high) of one partition; retried while a new topic's leader settles."""
        deadline = time.monotonic() + TOPIC_TIMEOUT_S
        while True:
            try:
                low, high = self._consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=BROKER_TIMEOUT_S, cached=False
                )
                return int(low), int(high)
            except KafkaException as exc:
                if not exc.args[0].retriable() and exc.args[0].code() not in (
                    KafkaError.NOT_LEADER_FOR_PARTITION,
                    KafkaError.LEADER_NOT_AVAILABLE,
                    KafkaError.UNKNOWN_TOPIC_OR_PART,
                ):
                    raise
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def end_offsets(self, topic: str) -> dict[int, int]:
        """High watermark per partition."""
        return {p: self.watermarks(topic, p)[1] for p in self.partitions(topic)}

    def count(self, topic: str) -> int:
        """Records in `topic` (sum of high - low watermarks); 0 while it does not exist."""
        if topic not in self.admin.list_topics(timeout=BROKER_TIMEOUT_S).topics:
            return 0
        watermarks = [self.watermarks(topic, p) for p in self.partitions(topic)]
        return sum(high - low for low, high in watermarks)

    def committed(self, group: str, topic: str) -> dict[int, int]:
        """The group's committed offset per partition of `topic` (-1001: none)."""
        request = ConsumerGroupTopicPartitions(
            group, [TopicPartition(topic, p) for p in self.partitions(topic)]
        )
        deadline = time.monotonic() + TOPIC_TIMEOUT_S
        while True:
            try:
                futures = self.admin.list_consumer_group_offsets([request])
                result = futures[group].result(timeout=BROKER_TIMEOUT_S)
                return {tp.partition: tp.offset for tp in result.topic_partitions}
            except KafkaException as exc:  # e.g. the coordinator is still loading
                if not exc.args[0].retriable() or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def caught_up(self, group: str, topic: str) -> bool:
        """The group committed every partition of `topic` up to its end."""
        return self.committed(group, topic) == self.end_offsets(topic)

    def close(self) -> None:
        self._consumer.close()


@pytest.fixture(scope="session")
def kafka_probe(kafka_bootstrap: str, kafka_admin: AdminClient) -> Iterator[KafkaProbe]:
    probe = KafkaProbe(kafka_bootstrap, kafka_admin)
    yield probe
    probe.close()


# -- matching output to input --------------------------------------------------------------------


@dataclass
class Match:
    """Output records matched to the input records they carry (by decoded value)."""

    inputs: int
    outputs: int
    lost: int
    duplicates: int
    rewinds: int  # per partition: times the output went back to an earlier input offset


def match_output(
    inputs: Sequence[Record],
    outputs: Sequence[Record],
    decoder: Decoder,
    dict_id: int | None = None,
    header: str = "zd",
) -> Match:
    """Decode every output record, find its input, check it, count lost and duplicated ones.

    Asserts for every output record: it decodes byte-exact to an input value, in the input's
    partition, with its key, timestamp and headers (plus ours); with `dict_id`, every duplicate
    is byte-identical to its first copy; per partition the output is the input in order,
    possibly with rewinds (a restart re-reading from the last commit) but never with a gap. Our
    header must name `dict_id` when given (any id otherwise: dictionaries may change in a run).
    """
    by_value = {r.value: r for r in inputs}
    assert len(by_value) == len(inputs), "input values must be unique to match them"
    first_copy: dict[tuple[int, int], Record] = {}
    copies: Counter[tuple[int, int]] = Counter()
    sequence: dict[int, list[int]] = defaultdict(list)
    for out in sorted(outputs, key=lambda r: (r.partition, r.offset)):
        decoded = decoder.decode(out.value, list(out.headers))
        source = by_value.get(decoded)
        assert source is not None, f"output {out.partition}@{out.offset} decodes to no input"
        assert out.partition == source.partition, "output partition differs from input's"
        assert (out.key, out.timestamp) == (source.key, source.timestamp)
        added = out.headers[len(source.headers) :]
        assert out.headers[: len(source.headers)] == source.headers, out.headers
        assert added == () or (
            len(added) == 1
            and added[0][0] == header
            and (dict_id is None or added[0][1] == str(dict_id).encode())
        ), out.headers
        where = (source.partition, source.offset)
        copies[where] += 1
        if where in first_copy:
            # With one dictionary a duplicate is byte-identical; when dictionaries change, a
            # re-read record may be encoded with a newer one: it still decodes to the same input.
            if dict_id is not None:
                first = first_copy[where]
                assert (out.key, out.value, out.headers, out.timestamp) == (
                    first.key,
                    first.value,
                    first.headers,
                    first.timestamp,
                ), f"duplicate of input {where} differs from its first copy"
        else:
            first_copy[where] = out
        sequence[out.partition].append(source.offset)
    rewinds = 0
    for partition, offsets in sequence.items():
        for prev, cur in itertools.pairwise(offsets):
            assert cur <= prev + 1, f"partition {partition}: gap after input offset {prev}"
            if cur <= prev:
                rewinds += 1
        assert offsets[0] == 0, f"partition {partition} starts at input offset {offsets[0]}"
    lost = sum(1 for r in inputs if (r.partition, r.offset) not in copies)
    duplicates = sum(n - 1 for n in copies.values())
    return Match(len(inputs), len(outputs), lost, duplicates, rewinds)


# -- the sidecar as a real process ---------------------------------------------------------------


def free_port() -> int:
    """A loopback TCP port nobody listens on (just released by the kernel)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@dataclass
class Sidecar:
    """One `python -m sidecar ...` process; stdout and stderr go to `log_path`."""

    name: str
    command: list[str]
    log_path: Path
    metrics_port: int | None
    proc: subprocess.Popen[bytes]
    started: float
    _log_file: IO[bytes] = field(repr=False)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def running(self) -> bool:
        return self.proc.poll() is None

    def terminate(self) -> None:
        """SIGTERM: the graceful stop."""
        self.proc.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL (kill -9): no cleanup at all."""
        self.proc.send_signal(signal.SIGKILL)

    def wait(self, timeout: float = 60.0) -> int:
        """The exit code (negative: killed by that signal); fails if still running after timeout."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError(
                f"{self.name} still running {timeout:.0f} s later; killed. Log tail:\n{self.tail()}"
            ) from None

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM, then wait for the exit code."""
        self.terminate()
        return self.wait(timeout)

    def close(self) -> None:
        if self.running():
            self.proc.kill()
            self.proc.wait(10)
        self._log_file.close()

    # -- the log -------------------------------------------------------------------------------

    def log_text(self) -> str:
        self._log_file.flush()
        return self.log_path.read_bytes().decode("utf-8", errors="replace")

    def log_lines(self) -> list[dict[str, Any]]:
        """Every line, parsed as JSON; a line that is not JSON becomes ``{"raw": line}``."""
        out: list[dict[str, Any]] = []
        for line in self.log_text().splitlines():
            if not line.strip():
                continue
            try:
                parsed = json.loads(line)
            except ValueError:
                parsed = None
            out.append(parsed if isinstance(parsed, dict) else {"raw": line})
        return out

    def events(self, name: str) -> list[dict[str, Any]]:
        return [line for line in self.log_lines() if line.get("event") == name]

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def wait_for_event(
        self,
        name: str,
        timeout: float = 30.0,
        where: Callable[[dict[str, Any]], bool] = lambda _e: True,
    ) -> dict[str, Any]:
        """The first logged `name` event matching `where`; fails on timeout or early exit."""
        deadline = time.monotonic() + timeout
        while True:
            found = [e for e in self.events(name) if where(e)]
            if found:
                return found[0]
            if not self.running():
                raise AssertionError(
                    f"{self.name} exited ({self.proc.returncode}) before logging {name}:\n"
                    f"{self.tail()}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name} logged no {name} in {timeout:.0f} s")
            time.sleep(0.05)

    def assignment(self) -> set[str]:
        """Input partitions held now, replayed from partitions_assigned/revoked/lost lines."""
        held: set[str] = set()
        for line in self.log_lines():
            event = line.get("event")
            if event == "partitions_assigned":
                held |= set(line["partitions"])
            elif event in ("partitions_revoked", "partitions_lost"):
                held -= set(line["partitions"])
        return held

    # -- the observability endpoint ------------------------------------------------------------

    def http_get(self, path: str, timeout: float = 5.0) -> tuple[int, bytes]:
        assert self.metrics_port is not None, "started without a metrics port"
        url = f"http://127.0.0.1:{self.metrics_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                return int(response.status), bytes(response.read())
        except urllib.error.HTTPError as exc:
            return int(exc.code), bytes(exc.read())

    def metrics(self) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        """One scrape of /metrics: sample (name, labels) → value."""
        from prometheus_client.parser import text_string_to_metric_families

        status, body = self.http_get("/metrics")
        assert status == 200, f"/metrics answered {status}"
        return {
            (sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(body.decode())
            for sample in family.samples
        }


StartSidecar = Callable[..., Sidecar]
"""``sidecar(*cli_args, env=None, bootstrap=None, metrics_port=None, name=None) -> Sidecar``"""


@pytest.fixture
def registry_topic() -> str:
    """The test's own registry topic (its processes create it): tests never share dictionaries."""
    return f"_zdict_dictionaries-{uuid.uuid4().hex}"


def environment_for(kafka_bootstrap: str, registry_topic: str) -> SidecarEnv:
    """Factory: the environment of a sidecar process.

    This process's environment without any ``ZDICT_*`` variable, plus KAFKA_BOOTSTRAP_SERVERS
    (`bootstrap`, default the test broker), ``ZDICT_LOG_FORMAT=json``, the metrics endpoint on
    127.0.0.1, ``ZDICT_REGISTRY__TOPIC`` = `registry_topic`, and `env` on top (a None value
    removes a variable).
    """

    def build(
        env: Mapping[str, str | None] | None = None, bootstrap: str | None = None
    ) -> dict[str, str]:
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("ZDICT_")}
        full_env.update(
            {
                BOOTSTRAP_ENV: bootstrap or kafka_bootstrap,
                "ZDICT_LOG_FORMAT": "json",
                "ZDICT_METRICS__HOST": "127.0.0.1",
                "ZDICT_REGISTRY__TOPIC": registry_topic,
            }
        )
        for key, value in (env or {}).items():
            if value is None:
                full_env.pop(key, None)
            else:
                full_env[key] = value
        return full_env

    return build


@pytest.fixture
def sidecar_env(kafka_bootstrap: str, registry_topic: str) -> SidecarEnv:
    """`environment_for` this test's broker and registry topic."""
    return environment_for(kafka_bootstrap, registry_topic)


SidecarEnv = Callable[..., dict[str, str]]
"""``sidecar_env(env=None, bootstrap=None) -> dict[str, str]``"""
RunCli = Callable[..., subprocess.CompletedProcess[bytes]]
"""``cli(*args, env=None, timeout=120) -> CompletedProcess`` (stdout and stderr captured)"""


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
    yield from _sidecars(sidecar_env, tmp_path)


@pytest.fixture(scope="module")
def module_sidecar(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StartSidecar]:
    """The `sidecar` factory for a set-up shared by a module's tests: processes live until the
    module's last test is done; they share a registry topic of the module's own."""
    env = environment_for(kafka_bootstrap, f"_zdict_dictionaries-{uuid.uuid4().hex}")
    yield from _sidecars(env, tmp_path_factory.mktemp("sidecars"))


def _sidecars(sidecar_env: SidecarEnv, tmp_path: Path) -> Iterator[StartSidecar]:
    started: list[Sidecar] = []

    def start(
        *cli_args: str,
        env: Mapping[str, str | None] | None = None,
        bootstrap: str | None = None,
        metrics_port: int | None = None,
        name: str | None = None,
    ) -> Sidecar:
        args = list(cli_args)
        port = metrics_port
        if args and args[0] == "run" and "--metrics-port" not in args:
            port = free_port() if port is None else port
            args += ["--metrics-port", str(port)]
        label = name or f"sidecar-{len(started) + 1}"
        log_path = tmp_path / f"{label}.log"
        log_file = log_path.open("wb")
        command = [sys.executable, "-m", "sidecar", *args]
        proc = subprocess.Popen(
            command,
            env=sidecar_env(env, bootstrap),
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
        process = Sidecar(label, command, log_path, port, proc, time.monotonic(), log_file)
        started.append(process)
        return process

    yield start

    for process in started:
        process.close()


def train_dictionary(
    store: Path,
    namespace: str,
    events: Sequence[bytes],
    work_dir: Path,
    extra_args: Sequence[str] = (),
) -> tuple[int, Path]:
    """Train with ``zdict-sidecar train [extra_args]``; the active dictionary's id and file."""
    from sidecar.dictionaries.store import DictionaryStore

    sample = work_dir / f"train-{namespace}.ndjson"
    sample.write_bytes(b"".join(event + b"\n" for event in events))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "sidecar",
            "train",
            "--input",
            str(sample),
            "--namespace",
            namespace,
            "--dictionaries",
            str(store),
            *extra_args,
        ],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
    dictionary = DictionaryStore(store).active(namespace)
    assert dictionary is not None, "training stored no active dictionary"
    path = store / namespace / f"{dictionary.id}.zdict"
    assert path.is_file()
    return dictionary.id, path


# -- private brokers -----------------------------------------------------------------------------

KAFKA_LOCAL = _HERE.parents[1] / "deploy" / "kafka" / "kafka-local"
#: A broker start or restart on the shared two cores takes 3-10 s; allow for a loaded machine.
KAFKA_LOCAL_TIMEOUT_S = 180.0


@dataclass
class PrivateBroker:
    """A broker of the tests' own (``kafka-local --home``): to stop, restart, pause and resume
    without disturbing the session's shared broker.

    `bootstrap` is the PLAINTEXT listener; `listeners` the extra ones by name (e.g.
    ``listeners["SECURE"]``). A restart (`start`) keeps the data and the ports, so clients
    configured with these addresses reconnect to the same broker.
    """

    name: str
    home: Path
    bootstrap: str
    listeners: dict[str, str]
    #: (what, seconds) of every start, restart and stop, as kafka-local timed them.
    timings: list[tuple[str, float]] = field(default_factory=list)

    @property
    def pid(self) -> int:
        """The broker's JVM process id (a new one after each restart)."""
        return int((self.home / "kafka.pid").read_text().strip())

    def _kafka_local(self, *args: str) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [sys.executable, str(KAFKA_LOCAL), "--home", str(self.home), *args],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=KAFKA_LOCAL_TIMEOUT_S,
            check=False,
        )
        assert result.returncode == 0, (
            f"kafka-local {' '.join(args)} for broker {self.name} failed:\n{result.stderr}\n"
            f"--- broker log ---\n{self.log_tail()}"
        )
        for what, seconds in re.findall(
            r"kafka-local: (start|restart|stop)\b[^:]*: ([0-9.]+)s", result.stderr
        ):
            self.timings.append((what, float(seconds)))
        return result

    def stop(self) -> float:
        """SIGTERM (the broker's graceful shutdown); its data and ports stay. Seconds taken."""
        started = time.monotonic()
        self._kafka_local("stop")
        return time.monotonic() - started

    def start(self) -> float:
        """Start it again on its data and ports (a restart, not a fresh broker). Seconds taken,
        until it serves."""
        started = time.monotonic()
        out = self._kafka_local("start", "--keep-data").stdout
        assert f"{BOOTSTRAP_ENV}={self.bootstrap}" in out, out
        return time.monotonic() - started

    def pause(self) -> None:
        """SIGSTOP: the process stays, its sockets stay open, nothing answers."""
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after `pause`."""
        os.kill(self.pid, signal.SIGCONT)

    def serving(self) -> bool:
        return (
            subprocess.run(
                [sys.executable, str(KAFKA_LOCAL), "--home", str(self.home), "status"],
                capture_output=True,
                stdin=subprocess.DEVNULL,
                timeout=60,
                check=False,
            ).returncode
            == 0
        )

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap})

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = (self.home / "broker.log").read_text(errors="replace")
        except FileNotFoundError:
            return "(no broker log)"
        return "\n".join(text.splitlines()[-lines:])

    def close(self) -> None:
        """Stop it for good (resumed first if paused); the data stays for post-mortems."""
        with_pid = (self.home / "kafka.pid").exists()
        if with_pid:
            with contextlib.suppress(ProcessLookupError, ValueError):
                self.resume()
        subprocess.run(
            [sys.executable, str(KAFKA_LOCAL), "--home", str(self.home), "stop"],
            capture_output=True,
            stdin=subprocess.DEVNULL,
            timeout=KAFKA_LOCAL_TIMEOUT_S,
            check=False,
        )


StartPrivateBroker = Callable[..., PrivateBroker]
"""``private_broker(name, listeners=(), properties=None) -> PrivateBroker``"""


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
