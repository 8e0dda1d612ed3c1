"""The one definition of saving: the estimate of what the producer's own batches store
(`stored_estimate`), and the relay's and the in-process producer's stored bytes from their
producer's statistics (`relay.stored`, `serde.stored`)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from confluent_kafka import Message
from prometheus_client import CollectorRegistry

from sidecar.metrics.stored import PRODUCER, RELAY, StoredBytes
from sidecar.record_batch import producer_codecs, stored_bytes
from sidecar.relay.stored import RelayStored
from sidecar.serde.statistics import stats_cb
from sidecar.serde.stored import ProducerStored
from sidecar.stored_estimate import SAMPLE_RUN, ProducerBatches, batch_compressor, stride


def _window(topic: str, batches: int, records: int, size: int) -> dict[str, Any]:
    """One statistics window's `topics` object: the topic's batches, records and bytes sent."""
    return {topic: {"batchsize": {"cnt": batches, "sum": size}, "batchcnt": {"sum": records}}}


def _value(registry: CollectorRegistry, name: str, topic: str, path: str) -> float | None:
    return registry.get_sample_value(name, {"topic": topic, "path": path})


@pytest.mark.parametrize("codec", ["none", "zstd"])
@pytest.mark.parametrize("fill", [1, 4, 16])
def test_the_estimate_of_a_whole_sample_is_the_producers_batches_byte_for_byte(
    codec: str, fill: int, events: list[bytes]
) -> None:
    records = [(value, ()) for value in events[:64]]
    sample = ProducerBatches(batch_compressor(codec), every=1)
    for i in sample.picks(len(records)):
        sample.add(None, records[i][0], ())
    expected = stored_bytes(records, fill, producer_codecs().get(codec))
    assert sample.estimate(64 // fill, 64) == expected


def test_the_sample_takes_runs_of_consecutive_records_across_calls_and_keeps_the_latest() -> None:
    sample = ProducerBatches(None, every=3, keep=3, run=2)  # 2 records taken, 4 left, again
    assert sample.picks(4) == [0, 1]
    assert sample.picks(3) == [2]
    assert sample.picks(2) == [0]
    assert sample.picks(9) == [3, 4]
    for n in range(5):
        sample.add(None, bytes([n]), ())
    # Three one-byte records of 8 bytes framed each, one batch header per batch.
    assert sample.estimate(1, 3) == 61 + 3 * 8


def test_a_window_samples_about_window_records_of_the_traffic_the_last_one_saw() -> None:
    sample = ProducerBatches(None, keep=4, run=2, window=4)
    assert sample.picks(12) == list(range(12))  # every record until the first window
    for n in range(12):
        sample.add(None, bytes([n]), ())
    # The 12 records in batches of 2: 6 headers, 12 records of 8 B.
    assert sample.estimate(6, 12) == 6 * 61 + 12 * 8
    assert stride(12, 4) == 3
    assert sample.picks(12) == [0, 1, 6, 7]  # one run of 2 in 3


def test_nothing_sampled_estimates_nothing_and_an_unknown_codec_is_refused() -> None:
    assert ProducerBatches(None).estimate(1, 10) is None
    with pytest.raises(ValueError, match="unknown batch codec 'brotli'"):
        batch_compressor("brotli")


def test_the_relay_counts_its_batches_under_the_input_against_the_sampled_input(
    events: list[bytes],
) -> None:
    registry = CollectorRegistry()
    stored = RelayStored(StoredBytes(registry), {"orders": "orders.zd"}, batch_compressor("zstd"))
    batch = [
        Message(topic="orders", partition=0, offset=i, key=b"k%d" % i, value=v, headers=None)
        for i, v in enumerate(events[:800])
    ]
    stored.offer("orders", batch)
    stored.on_producer_stats(_window("orders.zd", 50, 800, 40_000) | _window("other", 1, 1, 9))
    assert _value(registry, "zdict_stored_bytes_total", "orders", RELAY) == 40_000
    assert _value(registry, "zdict_stored_batches_total", "orders", RELAY) == 50
    # Every record of the first window, with their keys, in batches of the window's fill.
    reference = ProducerBatches(batch_compressor("zstd"), every=1)
    for msg in batch:
        reference.add(msg.key(), msg.value(), ())
    expected = reference.estimate(50, 800)
    assert _value(registry, "zdict_stored_without_sidecar_bytes_total", "orders", RELAY) == expected
    assert _value(registry, "zdict_stored_bytes_total", "other", RELAY) is None


def test_the_in_process_producer_samples_runs_of_records_across_topics() -> None:
    registry = CollectorRegistry()
    stored = ProducerStored(StoredBytes(registry), "none")
    for i in range(8 * SAMPLE_RUN):  # before the first window: every record
        stored.offer("x", None, b"%d" % i, None)
    stored.on_stats({})  # the window's 1,024 records call for no stride: every record again
    stored.on_stats(_window("x", 1, 1, 70))
    for i in range(SAMPLE_RUN * 2):
        stored.offer("a" if i % 2 else "b", None, b"%d" % i, None)
    stored.on_stats(_window("a", 1, 1, 70) | _window("b", 1, 1, 70))
    per_record = {"a": 9, "b": 9}  # length, attributes, 2 deltas, key, value 1+3, header count
    for topic, size in per_record.items():
        without = _value(registry, "zdict_stored_without_sidecar_bytes_total", topic, PRODUCER)
        assert without == pytest.approx(61 + size, abs=1)


def test_the_in_process_producer_samples_what_the_application_gave_as_bytes() -> None:
    registry = CollectorRegistry()
    stored = ProducerStored(StoredBytes(registry), "none")
    for i in range(16):
        stored.offer("t", "key", b"v" * 10, {"app": "x"} if i else [("app", b"x")])
    stored.on_stats(_window("t", 2, 16, 700))
    # length, attributes, 2 deltas, key 1+3, value 1+10, header count, header 1+3+1+1: 26.
    assert _value(registry, "zdict_stored_without_sidecar_bytes_total", "t", PRODUCER) == (
        2 * 61 + 16 * 26
    )
    assert _value(registry, "zdict_stored_bytes_total", "t", PRODUCER) == 700


def test_the_in_process_producer_counts_nothing_for_a_codec_kafka_does_not_name() -> None:
    registry = CollectorRegistry()
    stored = ProducerStored(StoredBytes(registry), "inherit")
    stored.offer("t", None, b"v", None)
    stored.on_stats(_window("t", 1, 1, 70))
    assert _value(registry, "zdict_stored_bytes_total", "t", PRODUCER) is None


def test_the_statistics_json_feeds_every_reader_then_the_application() -> None:
    seen: list[Any] = []
    report = json.dumps({"topics": {"t": {}}})
    stats_cb([seen.append, seen.append], seen.append)(report)
    stats_cb([seen.append], None)("not json")
    assert seen == [{"t": {}}, {"t": {}}, report, {}]
