"""Poison records in the registry topic of a real broker, while a relay and a decoder follow it.

A relay (`zdict-sidecar run`, a real process) starts with a trained dictionary, its champion,
which it publishes to the test's own registry topic; a `Decoder` over
`RegistryResolver.connect` follows that topic. Then a plain producer publishes a record of
every kind issue 12 found harmful: dictionaries with ids 0, 5 and 2^32-1, each with its
activation; a junk claim of id 2^31-1; training entries nested 60,000 and 100,000 deep, and
`[]`; a dictionary whose tables zstd cannot load, one with level 2^40, one of 1.5 MiB, one in
namespace `.ids`, each activated; an activation tombstone; and after them a valid training
entry. The relay keeps relaying with its champion, a second relay started after the poison
(where one record used to make every `run` exit with a traceback) starts and relays with the
champion it finds in the registry, and the decoder decodes every record of both.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import zstandard

from sidecar.bench.events import generate
from sidecar.codec import Decoder, header_dict_id
from sidecar.dictionaries.model import Dictionary, TrainingSample, sha256_hex, with_dict_id
from sidecar.dictionaries.registry import RegistryResolver
from sidecar.dictionaries.registry_state import FORMAT, FORMAT_HEADER, META_HEADER
from sidecar.dictionaries.store import DictionaryStore
from sidecar.kafka import plain_producer

from .launch import StartSidecar
from .probe import KafkaProbe
from .process import Sidecar
from .records import ConsumeAll, ProduceEvents, Record
from .topics import MakeTopic
from .waiting import wait_until

HEADER = "zd"
BATCH = 2_000
#: The relay reads the registry every second; nothing trains (the champion must stay).
RELAY_ENV = {"ZDICT_REGISTRY__FOLLOW_INTERVAL": "1"}

#: (key, value, headers) of a record to publish, headers typed as confluent-kafka takes them.
Poison = tuple[bytes, bytes | None, list[tuple[str, str | bytes | None]]]


def _dictionary(base: Dictionary, dict_id: int, data: bytes | None = None, **meta: Any) -> Poison:
    """A dictionary record as a hostile writer publishes it: metadata never validated."""
    data = with_dict_id(base.data if data is None else data, dict_id % 2**32)
    fields = base.meta.model_dump(mode="json") | {
        "id": dict_id,
        "sha256": sha256_hex(data),
        "size": len(data),
        **meta,
    }
    key = f"dictionary/{dict_id}/{fields['sha256']}".encode()
    return key, data, [(FORMAT_HEADER, FORMAT), (META_HEADER, json.dumps(fields).encode())]


def _activation(namespace: str, dict_id: int) -> Poison:
    value = {
        "namespace": namespace,
        "dict_id": dict_id,
        "action": "activate",
        "by": "poison",
        "at": "2026-01-01T00:00:00Z",
        "stack": [],
    }
    return f"active/{namespace}".encode(), json.dumps(value).encode(), [(FORMAT_HEADER, FORMAT)]


def _training(namespace: str, value: bytes) -> Poison:
    return f"training/{namespace}".encode(), value, [(FORMAT_HEADER, FORMAT)]


def _poison(champion: Dictionary) -> list[Poison]:
    ns = champion.namespace
    broken_tables = champion.data[:8] + bytes(len(champion.data) - 8)
    return [
        _dictionary(champion, 0),
        _activation(ns, 0),
        _dictionary(champion, 5),
        _activation(ns, 5),
        _dictionary(champion, 2**32 - 1),
        _activation(ns, 2**32 - 1),
        (b"dictionary/2147483647/x", b"junk", [(FORMAT_HEADER, FORMAT)]),
        _training(ns, b"[" * 100_000),
        _training(ns, b"[" * 60_000),
        _training(ns, b"[]"),
        _dictionary(champion, 40_000, broken_tables),
        _activation(ns, 40_000),
        _dictionary(champion, 40_001, level=2**40),
        _activation(ns, 40_001),
        _dictionary(champion, 40_002, champion.data + bytes(1_500_000)),
        _activation(ns, 40_002),
        _dictionary(champion, 40_003, namespace=".ids"),
        (f"active/{ns}".encode(), None, []),
    ]


def _publish(bootstrap: str, topic: str, records: list[Poison]) -> None:
    producer = plain_producer(bootstrap, {"message.max.bytes": 4 * 1024 * 1024, "acks": "all"})
    failures: list[str] = []
    for key, value, headers in records:
        producer.produce(
            topic,
            key=key,
            value=value,
            headers=headers,
            on_delivery=lambda err, _msg: failures.append(err.str()) if err else None,
        )
    assert producer.flush(30) == 0, "poison records still undelivered after 30 s"
    assert not failures, failures


def _dict_ids(records: list[Record]) -> set[int | None]:
    """The dictionary ids the records' `zd` headers name (None: no header)."""
    return {header_dict_id(record.headers, HEADER) for record in records}


def _read(consume_all: ConsumeAll, kafka_probe: KafkaProbe, topic: str, n: int) -> list[Record]:
    wait_until(lambda: kafka_probe.count(topic) >= n, 60, f"{n} records in {topic}")
    records = consume_all(topic, n, timeout=60)
    assert len(records) == n
    return records


def _no_traceback(proc: Sidecar) -> None:
    assert "Traceback" not in proc.log_text(), proc.tail(60)


def _activations(proc: Sidecar) -> set[int]:
    return {e["dict_id"] for e in proc.events("dictionary_activated_from_registry")}


@pytest.fixture
def champion_store(tmp_path: Path, make_topic: MakeTopic) -> tuple[str, Path]:
    """An input topic and a store holding one active dictionary for it (the champion)."""
    topic = make_topic(partitions=1, name_prefix="registry-poison")
    store_dir = tmp_path / "store-a"
    # The zstandard stub's element type (its list is invariant).
    samples: list[bytes | bytearray | memoryview] = list(generate("product_viewed", 4_000, seed=41))
    data = zstandard.train_dictionary(8192, samples).as_bytes()
    store = DictionaryStore(store_dir)
    champion = store.add(
        topic,
        data,
        level=3,
        heldout_ratio=2.0,
        nodict_ratio=1.0,
        break_even_size=0,  # every event compressed: every output record carries the id
        training=TrainingSample(count=4_000, bytes=1, heldout_count=1, heldout_bytes=1),
    )
    store.activate(topic, champion.id)
    return topic, store_dir


def test_poison_in_the_registry_changes_nothing_for_relays_and_decoders(
    champion_store: tuple[str, Path],
    sidecar: StartSidecar,
    kafka_bootstrap: str,
    registry_topic: str,
    produce_events: ProduceEvents,
    consume_all: ConsumeAll,
    kafka_probe: KafkaProbe,
    tmp_path: Path,
) -> None:
    started = time.monotonic()
    topic, store_dir = champion_store
    champion = DictionaryStore(store_dir).active(topic)
    assert champion is not None
    run = ["run", "--input-topic", topic, "--create-topics", "--no-training"]
    group = f"zdict-it-poison-{uuid.uuid4().hex[:12]}"
    relay = sidecar(
        *run, "--dictionaries", str(store_dir), "--group-id", group, env=RELAY_ENV, name="relay"
    )
    relay.wait_for_event("dictionary_adopted", timeout=60)
    inputs = produce_events(topic, BATCH, seed=1)
    _read(consume_all, kafka_probe, f"{topic}.zd", BATCH)

    resolver = RegistryResolver.connect(kafka_bootstrap, topic=registry_topic, follow_interval=0.2)
    with Decoder(resolver) as decoder:
        poison = _poison(champion)
        valid_after = {"decision": "rejected", "finished_at": time.time(), "after": "poison"}
        _publish(
            kafka_bootstrap,
            registry_topic,
            [*poison, _training(topic, json.dumps(valid_after).encode())],
        )
        # The relay reads every poison record, ignores each (one log line each), and goes on.
        wait_until(
            lambda: (
                len(relay.events("registry_record_ignored")) >= len(poison) or not relay.running()
            ),
            30,
            "the relay to read the poison",
        )
        inputs += produce_events(topic, BATCH, seed=2)

        # A relay started after the poison: it starts, takes the champion from the registry.
        late = sidecar(
            *run,
            "--dictionaries",
            str(tmp_path / "store-b"),
            "--group-id",
            f"{group}-late",
            "--output-topic",
            "{topic}.late",
            env=RELAY_ENV,
            name="late-relay",
        )
        first = _read(consume_all, kafka_probe, f"{topic}.zd", 2 * BATCH)
        second = _read(consume_all, kafka_probe, f"{topic}.late", 2 * BATCH)

        # The decoder followed past the poison to the valid record after it.
        wait_until(
            lambda: resolver.registry.state.trainings.get(topic) == valid_after,
            10,
            "the decoder to read the training entry after the poison",
        )
        state = resolver.registry.state
        assert set(state.dictionaries) == {champion.id}
        active = state.active(topic)
        assert active is not None and active.id == champion.id
        for output in (first, second):
            assert _dict_ids(output) == {champion.id}
            decoded = [decoder.decode(r.value, r.headers) for r in output]
            assert decoded == [r.value for r in inputs]

    for proc in (relay, late):
        assert proc.running(), proc.tail(60)
        _no_traceback(proc)
        assert _activations(proc) <= {champion.id}
    assert late.events("relay_configured"), late.tail()
    ignored = relay.events("registry_record_ignored")
    assert all({"topic", "offset", "key", "reason"} <= line.keys() for line in ignored)
    assert {line["kind"] for line in ignored} >= {"invalid", "malformed", "too_large", "integrity"}
    counted = sum(
        value
        for (name, _), value in relay.metrics().items()
        if name == "zdict_registry_records_ignored_total"
    )
    assert counted >= len(poison)
    print(
        f"\n{len(poison)} poison records ignored by each reader; 2 relays x {2 * BATCH} records "
        f"relayed with dictionary {champion.id} and decoded; {time.monotonic() - started:.1f} s"
    )
