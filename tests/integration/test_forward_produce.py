"""`zdict-sidecar proxy` rewriting Produce in place (issue 26) with real clients
against the session broker: an idempotent confluent-kafka producer, a transactional one
(commits and aborts), producers compressing with gzip, lz4, zstd and snappy, and kcat -P, all
through the proxy. Reading the topic directly shows `zd` frames that `Decoder` decodes back to
the exact values, keys, headers and timestamps; a read_committed consumer sees the committed
records only; a topic outside the allow-list is refused; once trained (a small sample in these
settings) the dictionary is used."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from sidecar.bench.events import generate
from sidecar.codec import Decoder
from sidecar.dictionaries.store import DictionaryStore

from .forward_proxies import FAST_TRAINING, allowed, start_proxy, stop_proxy
from .launch import SidecarEnv, StartSidecar, environment_for, start_sidecars
from .process import Sidecar
from .topics import create_topic
from .training import train_dictionary
from .upstream_records import decoded, event, headers_of, read_all
from .waiting import wait_until

READ_TIMEOUT = 60.0
#: Record timestamps start here: recent, so that the broker's retention keeps them.
NOW_MS = int(time.time() * 1000) - 60_000
PREFIX = "zdict-it-fwdp"


class Proxy:
    """The module's proxy: its address, process and dictionary store, and how to
    start another of its kind (`start`, `env`: same registry, same trainers' group)."""

    def __init__(
        self,
        address: str,
        process: Sidecar,
        store: Path,
        trained: str,
        start: StartSidecar,
        env: dict[str, str],
    ) -> None:
        self.address = address
        self.process = process
        self.store = store
        #: The topic set up at start (`--topic`), which the proxy trains.
        self.trained = trained
        self.start = start
        self.env = env

    def decoder(self) -> Decoder:
        return Decoder.from_store(DictionaryStore(self.store))


@pytest.fixture(scope="module")
def proxy(
    kafka_bootstrap: str, kafka_admin: AdminClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Proxy]:
    env: SidecarEnv = environment_for(kafka_bootstrap, f"_zdict_dictionaries-{uuid.uuid4().hex}")
    work = tmp_path_factory.mktemp("forward-produce")
    trained = create_topic(kafka_admin, 2, None, f"{PREFIX}-train")
    starter = start_sidecars(env, work)
    start: StartSidecar = next(starter)
    store = work / "dictionaries"
    proxy_env = {
        **allowed(f"{PREFIX}-*"),
        "ZDICT_PROXY__GROUP_ID": f"{PREFIX}-{uuid.uuid4().hex}",
        **FAST_TRAINING,
    }
    address, process = start_proxy(
        start,
        "forward-produce",
        *("--topic", trained),
        env={**proxy_env, "ZDICT_DICTIONARIES": str(store)},
    )
    yield Proxy(address, process, store, trained, start, proxy_env)
    # Refusals are this module's subject (the allow-list, client batches): requests only.
    stop_proxy(process, troubles=("request_refused",))
    next(starter, None)


def produce_all(producer: Producer, records: list[dict[str, Any]]) -> list[str]:
    """Produce every record and flush; the delivery errors."""
    errors: list[str] = []
    for record in records:
        producer.produce(
            on_delivery=lambda err, _msg: errors.append(err.name()) if err else None, **record
        )
        producer.poll(0)
    assert producer.flush(READ_TIMEOUT) == 0, "records left undelivered"
    return errors


def records_for(topic: str, count: int, source: str, partitions: int = 1) -> list[dict[str, Any]]:
    return [
        {
            "topic": topic,
            "key": None if i % 5 == 0 else f"key-{i % 7}".encode(),
            "value": None if i % 50 == 49 else event(i, source),
            "headers": [("trace", f"t{i}".encode()), ("empty", None)] if i % 2 else [],
            "timestamp": NOW_MS + (i * 13) % 17,
            "partition": i % partitions,
        }
        for i in range(count)
    ]


def as_read(proxy: Proxy, messages: list[Message]) -> list[tuple[Any, ...]]:
    """(partition, key, value, headers, timestamp) decoded, in offset order per partition."""
    ordered = sorted(messages, key=lambda m: (m.partition(), m.offset()))
    return [
        (r["partition"], r["key"], r["value"], r["headers"], r["timestamp"])
        for r in decoded(proxy.decoder(), ordered)
    ]


def as_sent(records: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    by_partition = sorted(records, key=lambda r: r["partition"])  # stable: order kept within
    return [
        (r["partition"], r["key"], r["value"], r["headers"], r["timestamp"]) for r in by_partition
    ]


def compressed_share(messages: list[Message]) -> float:
    return sum(any(k == "zd" for k, _ in headers_of(m)) for m in messages) / len(messages)


def test_an_idempotent_producer_writes_zd_frames_that_decode_exactly(
    proxy: Proxy, kafka_admin: AdminClient, kafka_bootstrap: str
) -> None:
    topic = create_topic(kafka_admin, 3, None, f"{PREFIX}-idem")
    sent = records_for(topic, 600, "idempotent", partitions=3)
    producer = Producer(
        {"bootstrap.servers": proxy.address, "enable.idempotence": True, "linger.ms": 20}
    )
    assert produce_all(producer, sent) == []
    got = read_all(kafka_bootstrap, topic, len(sent))
    assert len(got) == len(sent), "nothing lost, nothing twice"
    assert as_read(proxy, got) == as_sent(sent)
    assert compressed_share(got) > 0.9


def test_transactions_commit_and_abort_and_read_committed_sees_the_committed(
    proxy: Proxy, kafka_admin: AdminClient, kafka_bootstrap: str
) -> None:
    topic = create_topic(kafka_admin, 1, None, f"{PREFIX}-tx")
    producer = Producer(
        {"bootstrap.servers": proxy.address, "transactional.id": f"tx-{uuid.uuid4().hex}"}
    )
    producer.init_transactions(30)
    committed: list[bytes] = []
    for round_, commit in enumerate([True, False, True]):
        producer.begin_transaction()
        values = [event(i, f"tx-{round_}") for i in range(100)]
        for value in values:
            producer.produce(topic, value=value, key=b"k", partition=0)
        if commit:
            producer.commit_transaction(30)
            committed += values
        else:
            producer.flush(30)
            producer.abort_transaction(30)
    consumer = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": f"{PREFIX}-{uuid.uuid4().hex}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[Message] = []
    deadline = time.monotonic() + READ_TIMEOUT
    try:
        while len(got) < len(committed) and time.monotonic() < deadline:
            got += [m for m in consumer.consume(500, 0.5) if m.error() is None]
        got += [m for m in consumer.consume(500, 1.0) if m.error() is None]
    finally:
        consumer.close()
    decoder = proxy.decoder()
    assert [decoder.decode(m.value(), headers_of(m)) for m in got] == committed
    assert compressed_share(got) > 0.9


@pytest.mark.parametrize("codec", ["gzip", "lz4", "zstd", "snappy"])
def test_client_compressed_batches_are_read_and_rewritten(
    codec: str, proxy: Proxy, kafka_admin: AdminClient, kafka_bootstrap: str
) -> None:
    topic = create_topic(kafka_admin, 1, None, f"{PREFIX}-{codec}")
    sent = records_for(topic, 200, codec)
    producer = Producer(
        {"bootstrap.servers": proxy.address, "compression.type": codec, "linger.ms": 20}
    )
    assert produce_all(producer, sent) == []
    got = read_all(kafka_bootstrap, topic, len(sent))
    assert as_read(proxy, got) == as_sent(sent)


def test_kcat_produces_through_the_proxy(
    proxy: Proxy, kafka_admin: AdminClient, kafka_bootstrap: str
) -> None:
    topic = create_topic(kafka_admin, 1, None, f"{PREFIX}-kcat")
    lines = [f"k{i}|{event(i, 'kcat').decode()}" for i in range(200)]
    produced = subprocess.run(
        ["kcat", "-P", "-b", proxy.address, "-t", topic, "-K", "|", "-H", "via=kcat"],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert produced.returncode == 0, produced.stderr
    got = decoded(proxy.decoder(), read_all(kafka_bootstrap, topic, len(lines)))
    assert [f"{r['key'].decode()}|{r['value'].decode()}|{r['headers']}" for r in got] == [
        f"{line}|[('via', b'kcat')]" for line in lines
    ]
    assert all(r["compressed"] for r in got)


def test_a_topic_outside_the_allow_list_is_refused(
    proxy: Proxy, kafka_admin: AdminClient, kafka_bootstrap: str
) -> None:
    topic = create_topic(kafka_admin, 1, None, "zdict-it-elsewhere")
    producer = Producer(
        {"bootstrap.servers": proxy.address, "message.timeout.ms": 10_000, "retries": 0}
    )
    errors = produce_all(producer, records_for(topic, 5, "refused"))
    assert errors == ["TOPIC_AUTHORIZATION_FAILED"] * 5
    assert read_all(kafka_bootstrap, topic, 0, timeout=2) == []
    refusals = proxy.process.events("produce_refused")
    assert refusals and refusals[0]["kind"] == "topic"


def test_after_training_the_dictionary_is_used(proxy: Proxy, kafka_bootstrap: str) -> None:
    producer = Producer({"bootstrap.servers": proxy.address, "linger.ms": 20})
    batch = 0
    store = DictionaryStore(proxy.store)

    def trained() -> bool:
        nonlocal batch
        batch += 1
        assert produce_all(producer, records_for(proxy.trained, 400, f"train-{batch}", 2)) == []
        return store.active(proxy.trained) is not None

    wait_until(trained, timeout=60, interval=1.0, what="a dictionary trained from Produce")
    active = store.active(proxy.trained)
    assert active is not None
    # The topic's own switch: another topic of the module may have trained first.
    proxy.process.wait_for_event(
        "dictionary_loaded",
        timeout=30,
        where=lambda e: e.get("namespace") == proxy.trained and e.get("dict_id") == active.id,
    )
    sent = records_for(proxy.trained, 200, "after", 2)
    assert produce_all(producer, sent) == []
    got = read_all(kafka_bootstrap, proxy.trained, 400 * batch + len(sent))
    decoder = proxy.decoder()
    latest = [m for m in got if decoder.dictionary_id(headers_of(m)) == active.id]
    assert len(latest) >= 150, "the new records are framed with the trained dictionary"


def test_one_proxy_of_the_group_trains_and_another_follows_the_registry(
    proxy: Proxy, tmp_path: Path
) -> None:
    """One trainer per topic (`proxy.group_id`): with a second proxy in the group, exactly one
    of the two trains the topic; the second, with a store of its own, takes the first one's
    dictionary from the registry. Both answer /healthz and /readyz; /metrics counts the Produce
    requests forwarded; SIGTERM stops the second with 0."""
    producer = Producer({"bootstrap.servers": proxy.address, "linger.ms": 20})
    assert produce_all(producer, records_for(proxy.trained, 50, "lifecycle", 2)) == []
    active = DictionaryStore(proxy.store).active(proxy.trained)
    assert active is not None, "trained by test_after_training_the_dictionary_is_used"
    second_store = tmp_path / "second-store"
    _, second = start_proxy(
        proxy.start,
        "forward-produce-second",
        *("--topic", proxy.trained),
        env={**proxy.env, "ZDICT_DICTIONARIES": str(second_store)},
    )

    def trainers() -> list[float]:
        return [
            value
            for process in (proxy.process, second)
            for (name, labels), value in process.metrics().items()
            if name == "zdict_trainer" and ("topic", proxy.trained) in labels
        ]

    wait_until(
        lambda: sorted(trainers()) == [0.0, 1.0], 60, "one trainer of the two proxies' topic"
    )
    wait_until(
        lambda: DictionaryStore(second_store).active(proxy.trained) is not None,
        30,
        "the second proxy's dictionary, from the registry",
    )
    followed = DictionaryStore(second_store).active(proxy.trained)
    assert followed is not None and followed.id == active.id
    for process in (proxy.process, second):
        assert process.http_get("/healthz")[0] == 200
        assert process.http_get("/readyz")[0] == 200
    produce_frames = [
        value
        for (name, labels), value in proxy.process.metrics().items()
        if name == "zdict_proxy_frames_total" and ("api", "Produce") in labels
    ]
    assert produce_frames and min(produce_frames) > 0, "Produce requests and answers counted"
    stop_proxy(second)


def test_a_full_client_batch_goes_raw_and_single_records_go_as_frames(
    kafka_bootstrap: str, kafka_admin: AdminClient, tmp_path: Path
) -> None:
    """Output mode auto (the default): a batch of a client's at or above the dictionary's
    crossover is written with its values as they came, under the batch compression; records
    sent one by one are framed. Through the proxy a consumer reads every value exactly."""
    topic = create_topic(kafka_admin, 1, None, f"{PREFIX}-mode")
    store = tmp_path / "dictionaries"
    train_dictionary(store, topic, list(generate("product_viewed", 5_000, seed=902)), tmp_path)
    active = DictionaryStore(store).active(topic)
    assert active is not None
    crossover = active.meta.output_crossover("zstd")
    assert crossover is not None and crossover < 256, active.meta.raw_crossover
    env = environment_for(kafka_bootstrap, f"_zdict_dictionaries-{uuid.uuid4().hex}")
    starter = start_sidecars(env, tmp_path)
    start: StartSidecar = next(starter)
    address, process = start_proxy(
        start,
        "forward-mode",
        "--no-training",
        env={
            **allowed(topic),
            "ZDICT_DICTIONARIES": str(store),
            "ZDICT_REGISTRY__ENABLED": "false",
            "ZDICT_CODEC__OUTPUT_MODE": "auto",
        },
    )
    values = list(generate("product_viewed", 512 + 20, seed=903))
    full = Producer(
        {
            "bootstrap.servers": address,
            "linger.ms": 1000,
            "batch.num.messages": 10_000,
            "compression.type": "zstd",
        }
    )
    assert produce_all(full, [{"topic": topic, "value": v} for v in values[:512]]) == []
    single = Producer({"bootstrap.servers": address, "linger.ms": 0})
    for value in values[512:]:
        assert produce_all(single, [{"topic": topic, "value": value}]) == []
    stored = read_all(kafka_bootstrap, topic, len(values))
    framed = [bool(headers_of(m)) for m in stored]
    assert framed == [False] * 512 + [True] * 20, "the full batch raw, single records framed"
    assert [m.value() for m in stored[:512]] == values[:512]
    got = read_all(address, topic, len(values))
    assert [m.value() for m in got] == values and not any(headers_of(m) for m in got)
    process.terminate()
    assert process.wait() == 0, process.tail()
    next(starter, None)
