"""Never more than plain batch zstd: the output crossover measured at training, the mode decision
with its hysteresis, the fills read from librdkafka's statistics, and the relay writing raw values
for a partition in raw mode."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any, cast

import pytest
from confluent_kafka import Message
from prometheus_client import CollectorRegistry

from sidecar.bench.events import generate
from sidecar.codec.output_mode import FRAMES, RAW, RAW_ABOVE, ModeTable, next_mode, smoothed
from sidecar.dictionaries.model import DictionaryMeta
from sidecar.dictionaries.store import DictionaryStore
from sidecar.kafka.batch_fill import BatchFills, batch_codec, share_batches
from sidecar.metrics import Metrics
from sidecar.record_batch import producer_codecs
from sidecar.relay.output_modes import RelayOutputModes
from sidecar.training.choice import train
from sidecar.training.crossover import CROSSOVER_VALUES, crossover_split, raw_crossovers
from sidecar.training.params import Decision, TrainingParams
from sidecar.training.split import split_ordered
from tests.unit.dictionaries import add_to_store
from tests.unit.relay_fakes import Clock, make_relay, record

# -- the crossover, measured at training ----------------------------------------------------------


def test_json_events_store_fewer_bytes_raw_once_batches_hold_about_ten_records() -> None:
    events = list(generate("product_viewed", 5000, seed=7))
    samples = split_ordered(events, 0.8)
    report = train(samples, TrainingParams(timing_runs=1), namespace="ev")
    assert report.decision is Decision.PROMOTED
    assert report.raw_crossover is not None
    zstd = report.raw_crossover["zstd"]
    # On values the stored dictionary saw this was 46, where later values cross at 9-10.
    assert zstd is not None and 6 < zstd < 16
    assert report.summary()["raw_crossover"] == report.raw_crossover
    assert report.crossover_count == len(samples.heldout) // 2


def test_the_crossover_is_measured_on_the_newest_held_out_values_which_the_refit_leaves_out() -> (
    None
):
    older, newest = crossover_split([b"%d" % i for i in range(20)])
    assert older == [b"%d" % i for i in range(10)] and newest == [b"%d" % i for i in range(10, 20)]
    assert crossover_split([b"a"]) == ([], [b"a"])
    many = [b"x"] * 20_000
    assert len(crossover_split(many)[1]) == CROSSOVER_VALUES


def test_values_the_dictionary_holds_whole_are_stored_smaller_as_frames_at_every_fill() -> None:
    rng = random.Random(3)
    vocabulary = [rng.randbytes(60) for _ in range(300)]
    values = [rng.choice(vocabulary) for _ in range(5000)]
    report = train(split_ordered(values, 0.8), TrainingParams(timing_runs=1), namespace="vocab")
    assert report.decision is Decision.PROMOTED
    assert report.raw_crossover == {"zstd": None, "lz4": None}


def test_a_run_that_stores_nothing_measures_no_crossover() -> None:
    values = [b"x" * 200] * 10  # too few to train
    report = train(split_ordered(values, 0.8), TrainingParams(timing_runs=1), namespace="few")
    assert report.decision is Decision.FAILED
    assert report.raw_crossover is None


def test_the_crossover_is_the_first_fill_where_raw_stores_no_more_than_frames() -> None:
    # Frames: each value cut to 10 bytes (as a dictionary might); raw values of 40 bytes that
    # batch compression shrinks once several share a batch.
    values = [b"event-%04d:" % (i % 7) + b"a" * 29 for i in range(256)]
    frames = [(v[:10], [("zd", b"\x80\x01")]) for v in values]
    found = raw_crossovers(values, frames, {"zstd": producer_codecs()["zstd"]})
    assert found["zstd"] is not None and 1 < found["zstd"] <= 256
    # Without batch compression raw values (40 B) never store less than 10-byte frames.
    none = raw_crossovers(values, frames, {"none": lambda section: section})
    assert none == {"none": None}


def test_only_fills_the_values_can_fill_are_measured() -> None:
    values = [b"v%d" % i for i in range(3)]
    frames = [(v, ()) for v in values]  # identical: raw ties at once
    assert raw_crossovers(values, frames, {"zstd": producer_codecs()["zstd"]}) == {"zstd": 1.0}
    with pytest.raises(ValueError, match="one length"):
        raw_crossovers(values, frames[:2])


def _meta(**fields: Any) -> dict[str, Any]:
    return {
        "id": 32768,
        "namespace": "orders",
        "version": 1,
        "sha256": "0" * 64,
        "size": 100,
        "created_at": "2026-01-01T00:00:00Z",
        "zstd_version": "1.5.6",
        "level": 3,
        "heldout_ratio": 2.0,
        "nodict_ratio": 1.0,
        "break_even_size": 0,
        "training": {"count": 1, "bytes": 1, "heldout_count": 1, "heldout_bytes": 1},
    } | fields


def test_metadata_written_before_the_crossover_existed_reads_as_unknown() -> None:
    old = DictionaryMeta.model_validate(_meta())
    assert old.raw_crossover is None and old.output_crossover("zstd") is None
    new = DictionaryMeta.model_validate(_meta(raw_crossover={"zstd": 31.5, "lz4": None}))
    assert new.output_crossover("zstd") == 31.5
    assert new.output_crossover("lz4") is None
    assert new.output_crossover("gzip") is None  # not measured for it: unknown
    assert DictionaryMeta.model_validate_json(new.model_dump_json()) == new


@pytest.mark.parametrize("crossover", [{"zstd": 0.5}, {"zstd": float("inf")}, {"Z ": 4.0}])
def test_a_crossover_out_of_range_is_refused(crossover: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="raw_crossover"):
        DictionaryMeta.model_validate(_meta(raw_crossover=crossover))


def test_a_promoted_dictionary_keeps_its_crossover_in_the_store(tmp_path: Path) -> None:
    store = DictionaryStore(tmp_path)
    events = list(generate("product_viewed", 3000, seed=7))
    report = train(split_ordered(events, 0.8), TrainingParams(timing_runs=1), namespace="ev")
    assert report.dictionary is not None and report.raw_crossover is not None
    stored = add_to_store(store, "ev", report.dictionary, raw_crossover=report.raw_crossover)
    assert store.get(stored.id).meta.raw_crossover == report.raw_crossover


# -- the decision ------------------------------------------------------------------------------


def test_raw_only_clearly_above_the_crossover_and_frames_only_clearly_below() -> None:
    assert next_mode(FRAMES, 10.0, 10.9) == FRAMES  # above, within the margin
    assert next_mode(FRAMES, 10.0, 11.1) == RAW
    assert next_mode(RAW, 10.0, 9.1) == RAW  # below, within the margin
    assert next_mode(RAW, 10.0, 8.9) == FRAMES


def test_an_unknown_crossover_means_frames_whatever_the_fill() -> None:
    assert next_mode(FRAMES, None, 10_000.0) == FRAMES
    assert next_mode(RAW, None, 10_000.0) == FRAMES


def test_a_fill_hovering_at_the_crossover_does_not_flap() -> None:
    table: ModeTable[int] = ModeTable()
    switches = [table.observe(0, fill, 10.0) for fill in (100, 100, 100)]
    assert table.mode(0) == RAW and table.raw == {0}
    assert [s.mode for s in switches if s is not None] == [RAW]
    for fill in (9.5, 10.5, 9.5, 10.5, 9.5, 10.5, 9.5, 10.5):
        assert table.observe(0, fill, 10.0) is None
    assert table.mode(0) == RAW
    for _ in range(3):
        table.observe(0, 1, 10.0)
    assert table.mode(0) == FRAMES and table.raw == set()


def test_a_window_without_batches_keeps_the_fill_and_a_lost_crossover_reverts_to_frames() -> None:
    table: ModeTable[str] = ModeTable()
    table.observe("p", 500, 10.0)
    assert table.observe("p", None, 10.0) is None and table.fill("p") == 500
    switch = table.observe("p", None, None)
    assert switch is not None and (switch.previous, switch.mode) == (RAW, FRAMES)
    assert table.mode("unseen") == FRAMES and table.observe("new", None, 10.0) is None


def test_the_fill_is_smoothed_over_windows() -> None:
    assert smoothed(None, 8.0) == 8.0
    assert smoothed(8.0, 16.0) == 12.0


# -- fills from librdkafka's statistics --------------------------------------------------------


def test_batches_are_shared_equally_but_never_more_than_a_partitions_records() -> None:
    assert share_batches({0: 100, 1: 100}, 4) == {0: 2.0, 1: 2.0}
    # One busy partition, one that sent 3 records: those 3 are 3 batches at most.
    assert share_batches({0: 1000, 1: 3}, 12) == {0: 9.0, 1: 3.0}
    assert share_batches({0: 5}, 0) == {0: 1.0}  # a partition that sent records sent a batch


def _stats(topic: str, batches: int, records: int, sent: dict[int, int]) -> dict[str, Any]:
    partitions = {str(p): {"partition": p, "txmsgs": n} for p, n in sent.items()}
    partitions["-1"] = {"partition": -1, "txmsgs": 0}
    return {topic: {"batchcnt": {"cnt": batches, "sum": records}, "partitions": partitions}}


def test_fills_per_partition_come_from_the_window_and_the_running_record_counts() -> None:
    fills = BatchFills()
    first = fills.window(_stats("out", 4, 400, {0: 200, 1: 200}))["out"]
    assert first.mean == 100 and first.partitions == {0: 100.0, 1: 100.0}
    second = fills.window(_stats("out", 12, 1003, {0: 1200, 1: 203}))["out"]
    assert second.partitions == {0: 1000 / 9, 1: 1.0}
    assert fills.window(_stats("out", 0, 0, {0: 1200, 1: 203})) == {}


def test_a_partitions_fill_is_never_above_what_the_producers_batches_hold() -> None:
    # A window's records sent and batches are counted at different moments: 11 records and 2
    # batches of at most 4 read 5.5 a batch.
    fills = BatchFills(batch_records=4)
    assert fills.window(_stats("out", 2, 8, {0: 11}))["out"].partitions == {0: 4.0}


def test_the_batch_codec_is_the_last_of_compression_type_and_its_alias() -> None:
    assert batch_codec({}) == "none"
    assert batch_codec({"compression.type": "zstd"}) == "zstd"
    assert batch_codec({"compression.type": "zstd", "compression.codec": "LZ4"}) == "lz4"


# -- the relay ---------------------------------------------------------------------------------


def _producer_stats(topic: str, batches: int, records: int, sent: dict[int, int]) -> str:
    return json.dumps({"type": "producer", "topics": _stats(topic, batches, records, sent)})


def _relay_with_dictionary(
    tmp_path: Path, trained_bytes: bytes, *, enabled: bool = True, batch_records: int = 10_000
) -> tuple[Any, Any, Any, CollectorRegistry]:
    store = DictionaryStore(tmp_path)
    stored = add_to_store(store, "in", trained_bytes, raw_crossover={"zstd": 8.0})
    store.activate("in", stored.id)
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    modes = RelayOutputModes(metrics, enabled=enabled, codec="zstd", batch_records=batch_records)
    relay, _, producer, events = make_relay(
        tmp_path,
        Clock(),
        metrics=metrics,
        partitions={"in": 2, "in.zd": 2},
        output_modes=modes,
    )
    return relay, producer, events, registry


def test_the_relay_writes_raw_values_to_a_partition_whose_batches_fill(
    tmp_path: Path, trained_bytes: bytes
) -> None:
    relay, producer, events, registry = _relay_with_dictionary(tmp_path, trained_bytes)
    # Partition 0 sends ~100 records a batch, partition 1 one at a time.
    events.on_stats(_producer_stats("in.zd", 13, 1003, {0: 1000, 1: 3}))
    value = b'{"event":"x","n":1}' * 8
    batch = [record(0, value, 0), record(0, value, 1), record(1, value, 0)]
    relay.relay_batch(cast("list[Message]", batch))
    produced = producer.produce.call_args_list
    by_partition = [(c.args[3], c.args[1], c.args[7]) for c in produced]
    assert by_partition[0] == (0, value, None)  # raw: as it came, no header of ours
    assert by_partition[2] == (0, value, None)
    assert by_partition[1][0] == 1 and by_partition[1][1] != value  # a frame ...
    assert by_partition[1][2] is not None and by_partition[1][2][0][0] == "zd"  # ... our header
    mode = registry.get_sample_value
    assert mode("zdict_output_mode", {"topic": "in.zd", "partition": "0", "mode": "raw"}) == 1
    assert mode("zdict_output_mode", {"topic": "in.zd", "partition": "0", "mode": "frames"}) == 0
    assert mode("zdict_output_mode", {"topic": "in.zd", "partition": "1", "mode": "frames"}) == 1
    # Only the framed record went through the encoder.
    compressed = {"topic": "in", "op": "encode", "outcome": "compressed"}
    assert mode("zdict_records_total", compressed) == 1


def test_the_relay_goes_back_to_frames_when_batches_shrink(
    tmp_path: Path, trained_bytes: bytes
) -> None:
    relay, producer, events, _ = _relay_with_dictionary(tmp_path, trained_bytes)
    events.on_stats(_producer_stats("in.zd", 2, 1000, {0: 1000}))
    sent = 1000
    for _ in range(8):  # windows of single-record batches
        sent += 5
        events.on_stats(_producer_stats("in.zd", 5, 5, {0: sent}))
    relay.relay_batch(cast("list[Message]", [record(0, partition=0)]))
    assert producer.produce.call_args_list[0].args[7][0][0] == "zd"


def test_output_mode_frames_writes_frames_at_any_fill(tmp_path: Path, trained_bytes: bytes) -> None:
    relay, producer, events, _ = _relay_with_dictionary(tmp_path, trained_bytes, enabled=False)
    events.on_stats(_producer_stats("in.zd", 2, 1000, {0: 1000}))
    relay.relay_batch(cast("list[Message]", [record(0, partition=0)]))
    assert producer.produce.call_args_list[0].args[7][0][0] == "zd"


def test_before_the_first_statistics_a_partitions_fill_is_its_first_consumed_batch(
    tmp_path: Path, trained_bytes: bytes
) -> None:
    relay, producer, events, _ = _relay_with_dictionary(tmp_path, trained_bytes)
    value = b'{"event":"x","n":1}' * 8
    backlog = [record(i, value, 0) for i in range(100)] + [record(0, value, 1)]
    relay.relay_batch(cast("list[Message]", backlog))
    produced = producer.produce.call_args_list
    assert all(c.args[7] is None for c in produced[:100])  # 100 at once: raw from the start
    assert produced[100].args[7][0][0] == "zd"  # one record: frames
    # From the first window on the statistics decide: partition 1 is not primed again.
    events.on_stats(_producer_stats("in.zd", 1, 100, {0: 100}))
    relay.relay_batch(cast("list[Message]", [record(i, value, 1) for i in range(1, 101)]))
    assert all(c.args[7][0][0] == "zd" for c in producer.produce.call_args_list[101:])


def test_statistics_windows_before_the_first_records_leave_the_first_batch_to_decide(
    tmp_path: Path, trained_bytes: bytes
) -> None:
    """A relay started ahead of its traffic gets windows without batches first: a backlog that
    then arrives goes raw from its first record, not in frames until a window reports it."""
    relay, producer, events, _ = _relay_with_dictionary(tmp_path, trained_bytes)
    for _ in range(3):
        events.on_stats(json.dumps({"type": "producer", "topics": {}}))
    value = b'{"event":"x","n":1}' * 8
    relay.relay_batch(cast("list[Message]", [record(i, value, 0) for i in range(128)]))
    assert all(c.args[7] is None for c in producer.produce.call_args_list)


def test_before_the_statistics_a_fill_is_at_most_the_producers_batch_num_messages(
    tmp_path: Path, trained_bytes: bytes, events: list[bytes]
) -> None:
    # Events the dictionary did not see: frames win at 4 a batch (the live crossover says so).
    relay, producer, _, _ = _relay_with_dictionary(tmp_path, trained_bytes, batch_records=4)
    backlog = [record(i, value, 0) for i, value in enumerate(events[4000:4100])]
    relay.relay_batch(cast("list[Message]", backlog))
    assert all(c.args[7][0][0] == "zd" for c in producer.produce.call_args_list)


def test_a_partitions_first_fill_goes_raw_only_past_the_band_as_any_switch_from_frames() -> None:
    table: ModeTable[str] = ModeTable()
    table.observe("a", 8.0 * RAW_ABOVE + 0.1, 8.0)
    table.observe("b", 8.0, 8.0)  # at the crossover: raw would save next to nothing
    assert (table.mode("a"), table.mode("b")) == (RAW, FRAMES)
    table.observe("b", 8.5, 8.0)  # smoothed 8.25: inside the band, frames held
    assert table.mode("b") == FRAMES
