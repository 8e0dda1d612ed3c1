"""The proxy (`zdict-sidecar proxy`) in front of a 3-broker local cluster:
its topics (replication factor 3, min ISR 2), the proxy as a real process that a test may kill
and start again on the same ports, and the streams of numbered records the failure tests count."""

from __future__ import annotations

import json
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # public, but not in __all__
    AdminClient,
    NewTopic,
)

from sidecar.codec import Decoder
from sidecar.dictionaries.store import DictionaryStore

from .forward_proxies import TROUBLES, start_proxy
from .launch import StartSidecar
from .local_cluster import LocalCluster
from .process import Sidecar, free_port
from .upstream_records import event
from .waiting import wait_until

BROKERS = 3
#: Every topic of these tests: each partition on all three brokers, two needed for acks=all.
REPLICATION = 3
MIN_ISR = 2
TOPIC_PREFIX = "zdict-it-fwdc"
#: How long a reader or a producer's flush may take, a broker or the proxy down meanwhile.
STREAM_TIMEOUT_S = 90.0


def create_cluster_topic(cluster: LocalCluster, partitions: int, name: str) -> str:
    """Create ``<prefix>-<name>-<uuid>`` (replication 3, min.insync.replicas 2); its name, once
    every partition is led with all three replicas in sync."""
    admin = cluster.admin()
    topic = f"{TOPIC_PREFIX}-{name}-{uuid.uuid4().hex[:12]}"
    created = admin.create_topics(
        [
            NewTopic(
                topic,
                num_partitions=partitions,
                replication_factor=REPLICATION,
                config={"min.insync.replicas": str(MIN_ISR)},
            )
        ],
        operation_timeout=30,
    )
    created[topic].result(timeout=35)
    wait_until(
        lambda: all_in_sync(admin, topic, partitions),
        30,
        f"every partition of {topic} led, with {REPLICATION} replicas in sync",
    )
    return topic


def all_in_sync(admin: AdminClient, topic: str, partitions: int) -> bool:
    """Whether each of the `partitions` of `topic` has a leader and all its replicas in sync."""
    found = admin.list_topics(topic=topic, timeout=10).topics.get(topic)
    if found is None or len(found.partitions) != partitions:
        return False
    return all(p.leader >= 0 and len(p.isrs) == REPLICATION for p in found.partitions.values())


def leaders(admin: AdminClient, topic: str) -> dict[int, int]:
    """Partition -> the node id leading it (-1: none), as the cluster's metadata has it."""
    metadata = admin.list_topics(topic=topic, timeout=10).topics[topic]
    return {p.id: p.leader for p in metadata.partitions.values()}


def free_port_run(count: int) -> int:
    """A port `base` such that base+1 .. base+count are free on loopback now."""
    for _ in range(50):
        base = free_port()
        probes = []
        try:
            for port in range(base + 1, base + count + 1):
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                probes.append(sock)
                sock.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for sock in probes:
                sock.close()
    raise AssertionError(f"no run of {count} free loopback ports found")


@dataclass
class ClusterProxy:
    """One proxy over the cluster, at `address` (bootstrap) and `port_base` + N for
    broker N; `processes` is every process it has run as, the current one last."""

    cluster: LocalCluster
    start: StartSidecar
    address: str
    port_base: int
    env: dict[str, str]
    store: Path
    #: The topic set up at start (`--topic`): trained from what is produced to it.
    trained: str
    processes: list[Sidecar] = field(default_factory=list)

    @property
    def process(self) -> Sidecar:
        return self.processes[-1]

    def launch(self) -> Sidecar:
        """Start a proxy process on the address and ports; returns once it listens."""
        _, process = start_proxy(
            self.start,
            f"forward-cluster-{len(self.processes) + 1}",
            *("--topic", self.trained),
            env=self.env,
            address=self.address,
            port_base=self.port_base,
        )
        self.processes.append(process)
        return process

    def kill_and_restart(self) -> float:
        """SIGKILL the proxy (no cleanup at all) and start it again on the same ports; the
        seconds it was away."""
        killed = time.monotonic()
        self.process.kill()
        assert self.process.wait(10) == -9
        self.launch()
        return time.monotonic() - killed

    def decoder(self) -> Decoder:
        """A decoder of the frames upstream, over the dictionaries the proxy trained."""
        return Decoder.from_store(DictionaryStore(self.store))

    def troubles(self) -> list[dict[str, Any]]:
        """What any of its processes logged of `forward_proxies.TROUBLES` but `produce_refused`."""
        kept = set(TROUBLES) - {"produce_refused"}
        return [e for p in self.processes for e in p.log_lines() if e.get("event") in kept]


def sequenced(source: str, seq: int) -> bytes:
    """A record value that names its place in a stream (``seq``), to count losses and twins."""
    return event(seq, source)


def sequence_of(value: bytes | None) -> int:
    assert value is not None
    seq: int = json.loads(value)["seq"]
    return seq


def produce_stream(
    producer: Producer,
    topic: str,
    source: str,
    count: int,
    rate: float,
    at: int,
    disruption: Callable[[], None],
    first: int = 0,
) -> list[str]:
    """Produce `count` records numbered from `first` at `rate` records/s (keys spread over the
    partitions); when the `at`-th (from 0) is due, run `disruption` (in this thread: the
    producer's own threads go on sending what is queued, retrying meanwhile). Flushes; the
    delivery errors."""
    errors: list[str] = []

    def delivered(err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            errors.append(err.str())

    started = time.monotonic()
    for seq in range(count):
        if seq == at:
            disruption()
            # The records due while the disruption ran are sent in a burst, not skipped.
            started = time.monotonic() - seq / rate
        ahead = started + seq / rate - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
        number = first + seq
        producer.produce(
            topic, value=sequenced(source, number), key=b"k-%d" % number, on_delivery=delivered
        )
        producer.poll(0)
    left = producer.flush(STREAM_TIMEOUT_S)
    assert left == 0, f"{left} records undelivered after {STREAM_TIMEOUT_S:.0f} s: {errors[:5]}"
    return errors


def read_partitions(
    bootstrap: str, topic: str, expected: int, config: dict[str, Any] | None = None
) -> list[Message]:
    """Every record of `topic` from offset 0, read at `bootstrap` (the brokers or the proxy),
    once `expected` have come, plus any arriving within a second more (a duplicate would)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{TOPIC_PREFIX}-read-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            **(config or {}),
        }
    )
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    found: list[Message] = []
    deadline = time.monotonic() + STREAM_TIMEOUT_S
    try:
        while len(found) < expected and time.monotonic() < deadline:
            found += [m for m in consumer.consume(1000, 0.5) if m.error() is None]
        found += [m for m in consumer.consume(1000, 1.0) if m.error() is None]
    finally:
        consumer.close()
    return sorted(found, key=lambda m: (m.partition() or 0, m.offset() or 0))


class RebalancingGroup:
    """Members of one consumer group (confluent-kafka, at `bootstrap`) on `topic` (of
    `partitions`), polled in
    turn by one thread; each commits what it read after every poll (synchronously, so a member
    that takes over a partition starts after it). `seen` is each member's record numbers."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, group_id: str) -> None:
        self.bootstrap, self.topic, self.group_id = bootstrap, topic, group_id
        self.partitions = partitions
        self.members: dict[str, Consumer] = {}
        #: Member -> partitions it holds now (its last assignment; 0 once revoked).
        self.held: dict[str, int] = {}
        #: The memberships the group settled in: every member holding partitions, all held.
        self.settled: list[tuple[str, ...]] = []
        self.assignments: list[tuple[str, int]] = []
        self.seen: dict[str, list[int]] = {}
        self.commit_errors: list[str] = []
        self.read = 0

    def join(self, name: str) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": self.group_id,
                "client.id": name,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 500,
            }
        )
        consumer.subscribe(
            [self.topic],
            on_assign=lambda _c, parts: self._assigned(name, len(parts)),
            on_revoke=lambda _c, _parts: self._assigned(name, 0),
        )
        self.members[name] = consumer
        self.seen.setdefault(name, [])

    def _assigned(self, name: str, count: int) -> None:
        if count:
            self.assignments.append((name, count))
        self.held[name] = count

    def leave(self, name: str) -> None:
        """Close the member: it leaves the group at once (LeaveGroup)."""
        self.members.pop(name).close()
        self.held.pop(name, None)

    def settle(self) -> bool:
        """Whether every member holds partitions and all the topic's are held (noted once)."""
        stable = all(self.held.get(n, 0) for n in self.members)
        stable = stable and sum(self.held.values()) == self.partitions
        names = tuple(sorted(self.members))
        if stable and (not self.settled or self.settled[-1] != names):
            self.settled.append(names)
        return stable

    def poll_round(self) -> None:
        """Each member polls once (0.1 s at most) and commits what it read."""
        for name, consumer in list(self.members.items()):
            messages = [m for m in consumer.consume(100, 0.1) if m.error() is None]
            if not messages:
                continue
            self.seen[name] += [sequence_of(m.value()) for m in messages]
            self.read += len(messages)
            try:
                consumer.commit(asynchronous=False)
            except KafkaException as exc:
                self.commit_errors.append(f"{name}: {exc}")

    def close(self) -> None:
        for consumer in self.members.values():
            consumer.close()

    def __str__(self) -> str:
        return (
            f"read per member: { {n: len(s) for n, s in self.seen.items()} }; assignments: "
            f"{self.assignments}; settled: {self.settled}; commit errors: {self.commit_errors}"
        )
