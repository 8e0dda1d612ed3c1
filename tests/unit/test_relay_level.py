"""The relay takes up a batch level chosen by a dictionary activated while it runs: its producer
replaced between two batches, flushed, committed and closed first (with exactly once, the
transaction committed and the new producer's transactions initialised). Spec'd fakes of the
clients; tests/integration/test_output_mode.py does it on a real broker."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from unittest.mock import MagicMock

import pytest
from confluent_kafka import Producer, TopicPartition
from prometheus_client import CollectorRegistry

from sidecar.dictionaries.store import DictionaryStore
from sidecar.metrics import Metrics
from sidecar.namespaces import DICTIONARY_CHECK_INTERVAL
from sidecar.relay.output_modes import RelayOutputModes
from sidecar.relay.producer_level import ProducerLevel
from tests.unit.dictionaries import add_to_store
from tests.unit.relay_fakes import Clock, Rig, delivered_message, deliveries, make_relay, record

ZSTD: dict[str, Any] = {"compression.type": "zstd"}


class Made:
    """The producers the relay made again, with the level each was made for."""

    def __init__(self) -> None:
        self.levels: list[int | None] = []
        self.producers: list[MagicMock] = []

    def __call__(self, level: int | None) -> Producer:
        producer = _producer()
        self.levels.append(level)
        self.producers.append(producer)
        return producer


def _producer() -> MagicMock:
    producer = MagicMock(spec_set=Producer)
    _serving_flush(producer)
    return producer


def _serving_flush(producer: MagicMock) -> None:
    """`producer`'s flush serves every delivery report due, as librdkafka's does."""

    def flush(*_: object) -> int:
        for report in deliveries(producer):
            report(None, delivered_message())
        return 0

    producer.flush.side_effect = flush


def _run(
    tmp_path: Path,
    trained_bytes: bytes,
    config: dict[str, Any],
    *,
    transaction_records: int | None = None,
    undelivered: int = 0,
) -> tuple[Rig, Made, Metrics, RelayOutputModes]:
    """A relay on a dictionary of batch level 3 relays two records, then a dictionary of level 9
    is activated and one more record relayed after the relay looked at the store."""
    store = DictionaryStore(tmp_path)
    first = add_to_store(store, "in", trained_bytes, batch_level=3)
    store.activate("in", first.id)
    second = add_to_store(store, "in", trained_bytes, batch_level=9)
    clock, made, metrics = Clock(), Made(), Metrics(CollectorRegistry())
    modes = RelayOutputModes(metrics, enabled=True, codec="zstd", level=3)
    rig = make_relay(
        tmp_path,
        clock,
        commit_interval=60.0,
        metrics=metrics,
        output_modes=modes,
        transaction_records=transaction_records,
        producer_level=ProducerLevel(config, 3, made),
    )
    relay, consumer, producer = rig.relay, rig.consumer, rig.producer
    _serving_flush(producer)
    if undelivered:
        producer.flush.side_effect = lambda *_: undelivered
    consumer.position.side_effect = lambda tps: [
        TopicPartition(tp.topic, tp.partition, 3) for tp in tps
    ]
    steps: list[Any] = [[record(0), record(1)], "activate", [], [record(2)]]

    def consume(*_: object) -> list[Any]:
        step = steps.pop(0) if steps else None
        if step is None:
            relay.stop()
            return []
        if step == "activate":
            store.activate("in", second.id)
            clock.now += DICTIONARY_CHECK_INTERVAL
            return []
        return list(step)

    consumer.consume.side_effect = consume
    relay.run()
    return rig, made, metrics, modes


def _produced(producer: MagicMock) -> int:
    """Records `producer` produced."""
    return sum(1 for c in producer.method_calls if c[0] == "produce")


def test_a_dictionary_activated_with_another_level_replaces_the_producer_between_batches(
    tmp_path: Path, trained_bytes: bytes
) -> None:
    rig, made, metrics, modes = _run(tmp_path, trained_bytes, ZSTD)
    old = rig.producer
    assert made.levels == [9]
    (new,) = made.producers
    assert _produced(old) == 2 and _produced(new) == 1
    names = [c[0] for c in old.method_calls if c[0] != "poll"]
    # Flushed, its records' offsets committed, then closed: nothing of it is left in flight.
    assert names[-2:] == ["flush", "close"]
    committed = rig.consumer.commit.call_args_list[0].kwargs["offsets"]
    assert [(tp.topic, tp.partition, tp.offset) for tp in committed] == [("in", 0, 2)]
    assert modes.level == 9
    level = metrics.registry.get_sample_value("zdict_batch_compression_level", {"topic": "in"})
    assert level == 9


def test_exactly_once_commits_the_transaction_then_the_new_producer_fences_the_old(
    tmp_path: Path, trained_bytes: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "k1:9092")
    rig, made, _, _ = _run(tmp_path, trained_bytes, ZSTD, transaction_records=100)
    old, (new,) = rig.producer, made.producers
    old_calls = [c[0] for c in old.method_calls if c[0] not in ("poll", "flush")]
    assert old_calls == [
        "init_transactions",
        "begin_transaction",
        "produce",
        "produce",
        "send_offsets_to_transaction",
        "commit_transaction",
        "close",
    ]
    new_calls = [c[0] for c in new.method_calls if c[0] not in ("poll", "flush")]
    assert new_calls[:3] == ["init_transactions", "begin_transaction", "produce"]


def test_a_compression_level_of_the_users_keeps_the_producer(
    tmp_path: Path, trained_bytes: bytes
) -> None:
    rig, made, _, modes = _run(tmp_path, trained_bytes, {**ZSTD, "compression.level": "5"})
    assert made.levels == []
    assert _produced(rig.producer) == 3
    rig.producer.close.assert_not_called()
    assert modes.level == 3


def test_records_left_undelivered_defer_the_replacement(
    tmp_path: Path, trained_bytes: bytes
) -> None:
    rig, made, _, _ = _run(tmp_path, trained_bytes, ZSTD, undelivered=1)
    assert made.levels == []
    assert _produced(rig.producer) == 3
    rig.producer.close.assert_not_called()
