"""`zdict-sidecar proxy` in front of a 3-broker KRaft cluster (issue 26, "Tests").

One cluster and one proxy for the module (tests/integration/fixtures/clusters.py); every topic
has replication factor 3 and min.insync.replicas 2. Through the proxy:

1. Kafka's Java console producer, kcat -P and a confluent-kafka producer write one topic (its
   dictionary trained from the first records); the Java console consumer with --group, kcat -C
   -G and a confluent-kafka consumer group read byte-exact what was written (keys, values,
   headers, timestamps, order), while the brokers read directly hold `zd` frames.
2. Transactions committed and aborted (confluent-kafka, and Kafka's Java producer-perf-test with
   a transactional id): a read_committed consumer sees exactly the committed records, decoded.
3. An idempotent producer while the proxy is killed (SIGKILL) and started again on its ports:
   every numbered record once, none lost, none twice.
4. One broker of three stopped while an idempotent producer writes: producer and consumer follow
   the new leaders through the proxy's rewritten metadata, nothing lost; the broker starts again.
5. A consumer group of three members joining and leaving, committing through the proxy: every
   record read exactly once overall.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from typing import Any

from confluent_kafka import Consumer, Message, Producer

from sidecar.dictionaries.store import DictionaryStore

from .forward_cluster import (
    BROKERS,
    STREAM_TIMEOUT_S,
    TOPIC_PREFIX,
    ClusterProxy,
    RebalancingGroup,
    all_in_sync,
    create_cluster_topic,
    leaders,
    produce_stream,
    read_partitions,
    sequence_of,
)
from .kafka_tools import console_consumer, kafka_tool
from .local_cluster import LocalCluster
from .upstream_records import decoded, event, headers_of
from .waiting import wait_until

#: Timestamps of the records that set one: recent, so that retention keeps them.
NOW_MS = int(time.time() * 1000) - 60_000
#: (key, value, headers) as a producer wrote a record.
Written = tuple[bytes, bytes, list[tuple[str, bytes]]]


def _produce(producer: Producer, records: list[dict[str, Any]]) -> None:
    errors: list[str] = []
    for record in records:
        producer.produce(on_delivery=lambda e, _m: errors.append(e.str()) if e else None, **record)
        producer.poll(0)
    assert producer.flush(STREAM_TIMEOUT_S) == 0, "records left undelivered"
    assert errors == []


def _confluent_records(topic: str, start: int, count: int) -> list[dict[str, Any]]:
    return [
        {
            "topic": topic,
            "key": b"c-%d" % i,
            "value": event(i, "confluent"),
            "headers": [("src", b"confluent"), ("trace", b"t%d" % i)],
            "timestamp": NOW_MS + i,
        }
        for i in range(start, start + count)
    ]


def _train(proxy: ClusterProxy, written: list[Written]) -> None:
    """Produce to the proxy's trained topic through it until its dictionary is active there."""
    producer = Producer({"bootstrap.servers": proxy.address, "linger.ms": 20})
    store = DictionaryStore(proxy.store)

    def trained() -> bool:
        records = _confluent_records(proxy.trained, len(written), 300)
        _produce(producer, records)
        written.extend((r["key"], r["value"], r["headers"]) for r in records)
        return store.active(proxy.trained) is not None

    wait_until(trained, 90, "a dictionary trained from what was produced", interval=1.0)
    proxy.process.wait_for_event("dictionary_loaded", timeout=30)


def test_java_kcat_and_confluent_clients_read_byte_exact_what_they_wrote(
    cluster_proxy: ClusterProxy, three_brokers: LocalCluster
) -> None:
    proxy, topic = cluster_proxy, cluster_proxy.trained
    written: list[Written] = []
    _train(proxy, written)
    active = DictionaryStore(proxy.store).active(topic)
    assert active is not None

    java = [
        (b"j-%d" % i, event(i, "java"), [("src", b"java"), ("trace", b"t%d" % i)])
        for i in range(100)
    ]
    kafka_tool(
        "console-producer",
        "--bootstrap-server",
        proxy.address,
        "--topic",
        topic,
        "--reader-property",
        "parse.key=true",
        "--reader-property",
        "key.separator=|",
        "--reader-property",
        "parse.headers=true",
        stdin="".join(
            f"src:java,trace:t{i}\t{k.decode()}|{v.decode()}\n" for i, (k, v, _) in enumerate(java)
        ),
    )
    written += java
    kcat = [(b"kc-%d" % i, event(i, "kcat"), [("src", b"kcat")]) for i in range(100)]
    produced = subprocess.run(
        ["kcat", "-P", "-b", proxy.address, "-t", topic, "-K", "|", "-H", "src=kcat"],
        input="".join(f"{k.decode()}|{v.decode()}\n" for k, v, _ in kcat),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert produced.returncode == 0, produced.stderr
    written += kcat
    last = _confluent_records(topic, len(written), 100)
    _produce(Producer({"bootstrap.servers": proxy.address, "linger.ms": 20}), last)
    written += [(r["key"], r["value"], r["headers"]) for r in last]

    # The brokers, read directly: every value a `zd` frame, the last ones with the dictionary.
    stored = read_partitions(three_brokers.bootstrap, topic, len(written))
    assert len(stored) == len(written)
    assert all(any(k == "zd" for k, _ in headers_of(m)) for m in stored), "all compressed"
    assert all(m.value() != v for m, (_, v, _) in zip(stored, written, strict=True))
    decoder = proxy.decoder()
    assert all(decoder.dictionary_id(headers_of(m)) == active.id for m in stored[-300:])
    upstream = decoded(decoder, stored)
    assert [(r["key"], r["value"], r["headers"]) for r in upstream] == written
    timestamps = [r["timestamp"] for r in upstream]
    assert timestamps[-100:] == [r["timestamp"] for r in last], "CreateTime as the client set"
    expected = [(k, v, h, ts) for (k, v, h), ts in zip(written, timestamps, strict=True)]

    # Through the proxy: a confluent-kafka consumer group, kcat -C -G, the Java console consumer.
    group = Consumer(
        {
            "bootstrap.servers": proxy.address,
            "group.id": f"{TOPIC_PREFIX}-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    group.subscribe([topic])
    got: list[Message] = []
    deadline = time.monotonic() + STREAM_TIMEOUT_S
    try:
        while len(got) < len(expected) and time.monotonic() < deadline:
            got += [m for m in group.consume(500, 0.5) if m.error() is None]
        group.commit(asynchronous=False)
    finally:
        group.close()
    assert [(m.key(), m.value(), headers_of(m), m.timestamp()[1]) for m in got] == expected

    kcat_read = subprocess.run(
        [
            *("kcat", "-C", "-b", proxy.address, "-G", f"{TOPIC_PREFIX}-{uuid.uuid4().hex}"),
            *(topic, "-X", "auto.offset.reset=earliest", "-c", str(len(expected))),
            *("-f", "%k|%s|%h|%T\\n"),
        ],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert kcat_read.returncode == 0, kcat_read.stderr
    assert kcat_read.stdout.splitlines() == [
        f"{k.decode()}|{v.decode()}|{','.join(f'{hk}={hv.decode()}' for hk, hv in h)}|{ts}"
        for k, v, h, ts in expected
    ]

    java_read = console_consumer(
        proxy.address, topic, len(expected), f"{TOPIC_PREFIX}-{uuid.uuid4().hex}"
    )
    assert java_read == [
        f"CreateTime:{ts}\t{','.join(f'{hk}:{hv.decode()}' for hk, hv in h)}\t"
        f"{k.decode()}\t{v.decode()}"
        for k, v, h, ts in expected
    ]


def test_read_committed_sees_exactly_the_committed_transactions(
    cluster_proxy: ClusterProxy, three_brokers: LocalCluster
) -> None:
    proxy = cluster_proxy
    topic = create_cluster_topic(three_brokers, 2, "tx")
    producer = Producer(
        {"bootstrap.servers": proxy.address, "transactional.id": f"tx-{uuid.uuid4().hex}"}
    )
    producer.init_transactions(30)
    committed: list[tuple[int, bytes]] = []
    for round_, commit in enumerate([True, False, True, False, True]):
        values = [(i % 2, event(i, f"tx-{round_}")) for i in range(100)]
        producer.begin_transaction()
        for partition, value in values:
            producer.produce(topic, value=value, key=b"k", partition=partition)
        if commit:
            producer.commit_transaction(30)
            committed += values
        else:
            producer.flush(30)
            producer.abort_transaction(30)

    stored = read_partitions(
        three_brokers.bootstrap, topic, 500, {"isolation.level": "read_uncommitted"}
    )
    assert len(stored) == 500, "read upstream uncommitted, the aborted records are there too"
    assert all(any(k == "zd" for k, _ in headers_of(m)) for m in stored)
    got = read_partitions(
        proxy.address, topic, len(committed), {"isolation.level": "read_committed"}
    )
    assert [(m.partition(), m.value()) for m in got] == sorted(committed, key=lambda c: c[0])
    assert all(not m.headers() for m in got), "zd removed"

    # Kafka's Java producer, transactional (a commit every 200 ms), values from a file.
    java_topic = create_cluster_topic(three_brokers, 1, "java-tx")
    payloads = proxy.store.parent / "payloads.txt"
    payloads.write_text("".join(event(i, "java-tx").decode() + "\n" for i in range(50)))
    kafka_tool(
        "producer-perf-test",
        "--topic",
        java_topic,
        "--num-records",
        "400",
        "--throughput",
        "-1",
        "--payload-file",
        str(payloads),
        "--transactional-id",
        f"java-tx-{uuid.uuid4().hex}",
        "--transaction-duration-ms",
        "200",
        "--command-property",
        f"bootstrap.servers={proxy.address}",
    )
    allowed = {event(i, "java-tx") for i in range(50)}
    java_stored = read_partitions(three_brokers.bootstrap, java_topic, 400)
    assert all(any(k == "zd" for k, _ in headers_of(m)) for m in java_stored)
    java_got = read_partitions(
        proxy.address, java_topic, 400, {"isolation.level": "read_committed"}
    )
    assert len(java_got) == 400
    assert {m.value() for m in java_got} <= allowed


def test_an_idempotent_producer_loses_nothing_and_writes_nothing_twice_across_a_proxy_kill(
    cluster_proxy: ClusterProxy, three_brokers: LocalCluster
) -> None:
    proxy = cluster_proxy
    topic = create_cluster_topic(three_brokers, 3, "kill")
    producer = Producer(
        {
            "bootstrap.servers": proxy.address,
            "enable.idempotence": True,
            "linger.ms": 5,
            "reconnect.backoff.max.ms": 500,
        }
    )
    away: list[float] = []
    count = 3000
    errors = produce_stream(
        producer, topic, "kill", count, 600.0, 1000, lambda: away.append(proxy.kill_and_restart())
    )
    print(f"\nproxy away {away[0]:.1f} s; errors reported meanwhile: {errors[:3]}")

    stored = read_partitions(three_brokers.bootstrap, topic, count)
    assert sorted(sequence_of(r["value"]) for r in decoded(proxy.decoder(), stored)) == list(
        range(count)
    ), "upstream: every record once"
    assert all(any(k == "zd" for k, _ in headers_of(m)) for m in stored)
    got = read_partitions(proxy.address, topic, count)
    assert sorted(sequence_of(m.value()) for m in got) == list(range(count))


def test_clients_follow_new_leaders_while_a_broker_is_stopped(
    cluster_proxy: ClusterProxy, three_brokers: LocalCluster
) -> None:
    proxy, cluster = cluster_proxy, three_brokers
    admin = cluster.admin()
    topic = create_cluster_topic(cluster, 3, "failover")
    victim = leaders(admin, topic)[0]
    producer = Producer(
        {"bootstrap.servers": proxy.address, "enable.idempotence": True, "linger.ms": 5}
    )
    count = 2000
    try:
        errors = produce_stream(
            producer, topic, "failover", count, 400.0, 600, lambda: cluster.stop_broker(victim)
        )
        print(f"\nbroker {victim} stopped; errors reported meanwhile: {errors[:3]}")
        assert victim not in leaders(admin, topic).values()
        assert cluster.states()[victim] == "stopped"
        # A consumer through the proxy, with node `victim` down: every record, once.
        got = read_partitions(proxy.address, topic, count)
        assert sorted(sequence_of(m.value()) for m in got) == list(range(count))
    finally:
        if cluster.states().get(victim) == "stopped":
            cluster.start_broker(victim)
    wait_until(lambda: all_in_sync(admin, topic, 3), 60, f"broker {victim} back in every ISR")
    assert cluster.states() == dict.fromkeys(range(1, BROKERS + 1), "serving")
    more = produce_stream(producer, topic, "failover-back", 300, 1000.0, 0, lambda: None)
    assert more == []
    got = read_partitions(proxy.address, topic, count + 300)
    assert len(got) == count + 300


def test_a_consumer_group_of_three_reads_every_record_once_while_it_rebalances(
    cluster_proxy: ClusterProxy, three_brokers: LocalCluster
) -> None:
    proxy = cluster_proxy
    topic = create_cluster_topic(three_brokers, 6, "group")
    producer = Producer({"bootstrap.servers": proxy.address, "enable.idempotence": True})
    wave = 1500
    assert produce_stream(producer, topic, "group", wave, 1e6, 0, lambda: None) == []
    group = RebalancingGroup(proxy.address, topic, 6, f"{TOPIC_PREFIX}-{uuid.uuid4().hex}")
    # (records read overall, what happens then): members join, leave, and records come later.
    script: list[tuple[int, str, str]] = [
        (300, "join", "b"),
        (600, "join", "c"),
        (900, "leave", "a"),
        (900, "produce", ""),
        (2100, "leave", "b"),
    ]
    group.join("a")
    total = 2 * wave
    deadline = time.monotonic() + 2 * STREAM_TIMEOUT_S
    try:
        while time.monotonic() < deadline and (group.read < total or script):
            stable = group.settle()
            # The next step once its threshold is passed and the group settled after the last.
            while script and group.read >= script[0][0] and stable:
                _, action, name = script.pop(0)
                if action == "join":
                    group.join(name)
                elif action == "leave":
                    group.leave(name)
                else:
                    more = produce_stream(
                        producer, topic, "group", wave, 1e6, 0, lambda: None, wave
                    )
                    assert more == []
            group.poll_round()
        # Anything read twice would come within these seconds.
        quiet = time.monotonic() + 3
        while time.monotonic() < quiet:
            group.poll_round()
    finally:
        group.close()
    print(f"\n{group}")
    seen = group.seen
    everything = sorted(s for got in seen.values() for s in got)
    assert everything == list(range(total)), "every record read exactly once overall"
    assert all(seen.values()), "each of the three members read records"
    assert group.settled == [("a",), ("a", "b"), ("a", "b", "c"), ("b", "c"), ("c",)], (
        "the group settled as each member joined and left, all three together at one time"
    )
