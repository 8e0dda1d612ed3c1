"""Records written raw stay observable (`sidecar.codec.raw_values`): counted under outcome `raw`
at their size, and a bounded shadow sample of them keeps the live ratio measured."""

from __future__ import annotations

import gzip
import json
import math
import random
from pathlib import Path
from typing import Any, cast

import pytest
from confluent_kafka import Message
from prometheus_client import CollectorRegistry

from sidecar.codec import DEFAULT_HEADER_KEY, Encoder, Outcome
from sidecar.codec.raw_values import SHADOW_EVERY, RawShadow, Records, passed_raw
from sidecar.dictionaries import Dictionary
from sidecar.dictionaries.store import DictionaryStore
from sidecar.metrics import Metrics
from sidecar.relay.loop import Relay
from sidecar.relay.output_modes import RelayOutputModes
from sidecar.training.schedule import LiveRatio
from tests.unit.dictionaries import add_to_store
from tests.unit.relay_fakes import Clock, make_relay, record


class CountingEncoder(Encoder):
    """An encoder that counts the values it was asked to encode one by one."""

    def __init__(self, dictionary: Dictionary | None) -> None:
        super().__init__(dictionary)
        self.calls = 0

    def encode_value(self, value: bytes) -> tuple[bytes, str]:
        self.calls += 1
        return super().encode_value(value)


def _dictionary(tmp_path: Path, trained_bytes: bytes) -> Dictionary:
    store = DictionaryStore(tmp_path / "store")
    return add_to_store(store, "in", trained_bytes)


# -- counting --------------------------------------------------------------------------------


def test_a_raw_record_is_passed_as_it_came_and_counted_at_its_size() -> None:
    headers = [("app", b"1")]
    records: Records = [(b"x" * 300, headers), (None, None)]
    passed = passed_raw(records)
    assert [(t.value, t.headers, t.outcome) for t in passed] == [
        (b"x" * 300, headers, Outcome.RAW),
        (None, None, Outcome.RAW),
    ]
    assert [(t.input_bytes, t.output_bytes) for t in passed] == [(300, 300), (0, 0)]
    assert Outcome.RAW in Outcome.COUNTED and Outcome.RAW not in Outcome.ALL


def _stats(topic: str, batches: int, records: int, sent: dict[int, int]) -> dict[str, Any]:
    partitions = {str(p): {"partition": p, "txmsgs": n} for p, n in sent.items()}
    return {topic: {"batchcnt": {"cnt": batches, "sum": records}, "partitions": partitions}}


def _raw_relay(tmp_path: Path, trained_bytes: bytes) -> tuple[Relay, CollectorRegistry]:
    """A relay with a dictionary whose output partition 0 fills batches of ~100 records (raw)
    and partition 1 sends single records (frames)."""
    store = DictionaryStore(tmp_path)
    stored = add_to_store(store, "in", trained_bytes, raw_crossover={"zstd": 8.0})
    store.activate("in", stored.id)
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    modes = RelayOutputModes(metrics, enabled=True, codec="zstd")
    relay, _, _, events = make_relay(
        tmp_path,
        Clock(),
        metrics=metrics,
        partitions={"in": 2, "in.zd": 2},
        output_modes=modes,
    )
    report = {"type": "producer", "topics": _stats("in.zd", 13, 1003, {0: 1000, 1: 3})}
    events.on_stats(json.dumps(report))
    return relay, registry


def test_a_batch_with_raw_partitions_counts_every_record_and_claims_no_saving_for_raw(
    tmp_path: Path, trained_bytes: bytes, events: list[bytes]
) -> None:
    relay, registry = _raw_relay(tmp_path, trained_bytes)
    values = events[4000:4100]
    batch = [record(i, v, 0) for i, v in enumerate(values[:99])] + [record(0, values[99], 1)]
    relay.relay_batch(cast("list[Message]", batch))

    def sample(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, {"topic": "in", "op": "encode", **labels})

    assert sample("zdict_records_total", outcome="raw") == 99
    assert sample("zdict_records_total", outcome="compressed") == 1
    raw_bytes = sum(map(len, values[:99]))
    assert sample("zdict_input_bytes_total") == raw_bytes + len(values[99])
    framed = cast(float, sample("zdict_output_bytes_total")) - raw_bytes  # raw: out = in
    assert 0 < framed < len(values[99])  # the one frame's cost, header included
    # The codec's time is the encoded records' only: one batch of one record observed.
    assert sample("zdict_codec_batch_duration_seconds_count") == 1
    assert sample("zdict_codec_records_total") == 1


def test_a_relay_that_writes_nothing_raw_has_a_raw_series_at_zero(
    tmp_path: Path, trained_bytes: bytes
) -> None:
    relay, registry = _raw_relay(tmp_path, trained_bytes)
    relay.relay_batch(cast("list[Message]", [record(0, partition=1)]))
    labels = {"topic": "in", "op": "encode", "outcome": "raw"}
    assert registry.get_sample_value("zdict_records_total", labels) == 0


# -- the shadow sample -----------------------------------------------------------------------


def test_the_shadow_sample_takes_one_record_in_every_strided_over_batches() -> None:
    shadow = RawShadow(every=32)
    sizes = [1, 5, 31, 32, 33, 100, 7, 0, 64, 1000, 3]
    rng = random.Random(5)
    sizes += [rng.randrange(1, 200) for _ in range(200)]
    taken: list[int] = []
    start = 0
    for size in sizes:
        taken += [start + i for i in shadow.picks(size)]
        start += size
    assert taken == list(range(0, start, 32))  # exactly every 32nd raw record, whatever the batch


@pytest.mark.parametrize("every", [0, -1])
def test_a_shadow_stride_below_one_is_refused(every: int) -> None:
    with pytest.raises(ValueError, match="one record in `every`"):
        RawShadow(every)


def test_the_shadow_share_is_bounded_and_counts_nowhere_but_the_shadow(
    tmp_path: Path, trained_bytes: bytes, events: list[bytes]
) -> None:
    encoder = CountingEncoder(_dictionary(tmp_path, trained_bytes))
    shadow = RawShadow()
    records: Records = [(v, None) for v in events[4000:6000]]
    for start in range(0, len(records), 250):
        shadow.measure(encoder, records[start : start + 250])
    # At most one value in SHADOW_EVERY is encoded: raw mode keeps (1 - 1/32) of its saving.
    assert encoder.calls == math.ceil(len(records) / SHADOW_EVERY)
    assert encoder.calls / len(records) <= 1 / 32 + 1 / len(records)
    stats = encoder.stats
    assert (stats.messages, stats.input_bytes, stats.output_bytes) == (0, 0, 0)
    assert stats.shadow_messages == encoder.calls * SHADOW_EVERY


def test_the_shadow_leaves_out_what_the_live_ratio_leaves_out(
    tmp_path: Path, trained_bytes: bytes, events: list[bytes]
) -> None:
    encoder = Encoder(_dictionary(tmp_path, trained_bytes))
    ours = Encoder(None).encode(b'{"already": "encoded"}' * 10)
    records: Records = [
        (None, None),  # a tombstone: no bytes
        ours,  # ours already: excluded
        (gzip.compress(b"x" * 4000) + b"\0" * 200, None),  # compressed by someone else
        (events[4000], [(DEFAULT_HEADER_KEY + "-not", b"1")]),
    ]
    RawShadow(every=1).measure(encoder, records)
    stats = encoder.stats
    frame, outcome = encoder.encode_value(events[4000])
    assert outcome == Outcome.COMPRESSED
    assert stats.shadow_messages == 4
    assert stats.shadow_input_bytes == len(events[4000])
    assert stats.shadow_output_bytes == len(frame) + encoder.header_bytes


def test_a_raw_topic_keeps_its_live_ratio_close_to_the_encoded_one(
    tmp_path: Path, trained_bytes: bytes, events: list[bytes]
) -> None:
    """The relay writes every record raw, yet the live ratio is measured: from the shadow
    sample, within 5% of what encoding every record gives."""
    relay, registry = _raw_relay(tmp_path, trained_bytes)
    assert relay.namespaces is not None
    stats = relay.namespaces.encoder_stats("in")
    live = LiveRatio(window=1.0, min_messages=1000)
    live.observe(0.0, stats, stats.live_input_bytes, stats.live_output_bytes, stats.live_messages)
    values = events[4000:6000]
    for start in range(0, len(values), 200):
        batch = [record(start + i, v, 0) for i, v in enumerate(values[start : start + 200])]
        relay.relay_batch(cast("list[Message]", batch))
    live.observe(1.0, stats, stats.live_input_bytes, stats.live_output_bytes, stats.live_messages)
    ratio = live.ratio()
    assert ratio is not None
    everything = Encoder(relay.namespaces["in"].encoder.dictionary)
    everything.encode_batch([(v, None) for v in values])
    assert ratio == pytest.approx(everything.stats.ratio, rel=0.05)
    # Nothing was encoded for the output, and no byte counter claims a saving.
    assert stats.messages == 0
    labels = {"topic": "in", "op": "encode"}
    assert registry.get_sample_value(
        "zdict_input_bytes_total", labels
    ) == registry.get_sample_value("zdict_output_bytes_total", labels)
    assert registry.get_sample_value("zdict_records_total", {**labels, "outcome": "raw"}) == 2000
