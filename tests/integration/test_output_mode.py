"""Never more than plain batch zstd: a real relay, and the in-process producer, on the real broker
write frames while their batches hold one record, and raw values once they fill past the
dictionary's crossover; what the broker stores (its log segments, read as `bench storage` reads
them) is compared with the same records produced raw with producer zstd at the same fill. Less
than producer zstd's default level where the dictionary chose a higher batch level: the relay's
full batches store what producer zstd at that level stores, also when that dictionary is
activated while the relay runs (its producer replaced, exactly once, nothing lost or duplicated).

The broker must run on this machine: its `log.dirs` (asked of the broker itself) are read.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from prometheus_client import CollectorRegistry

from sidecar.bench.events import generate
from sidecar.codec import Encoder
from sidecar.dictionaries.model import Dictionary
from sidecar.dictionaries.store import DictionaryStore
from sidecar.record_batch import segment_batches
from sidecar.serde import ZdictProducer
from sidecar.serde.metrics import ProducerMetrics
from sidecar.training.batch_level import MIN_GAIN
from sidecar.wire.record_batch import BatchInfo

from .launch import RunCli, StartSidecar
from .log_dirs import log_dirs
from .process import Sidecar
from .records import ConsumeAll, ProduceEvents, Record
from .topics import MakeTopic
from .training import train_dictionary

#: Records the relay writes one at a time (one record per batch), then at full speed: a
#: warm-up while its producer's statistics show the fill, then the measured ones.
TRICKLE = 60
WARM_UP = 20_000
MEASURED = 20_000
#: The relay's output may store at most this much more than raw values with producer zstd.
TOLERANCE = 1.05
#: Its producer reports statistics this often (ms), so that the mode follows within a second.
STATISTICS_MS = "500"
#: The batch level test: records relayed until the partition is raw, then the measured ones,
#: `LEVEL_FILL` records a batch; its raw output stores at most `LEVEL_TOLERANCE` times what
#: producer zstd stores at the same level.
LEVEL_RECORDS = 8192
LEVEL_FILL = 512
LEVEL_TOLERANCE = 1.02


def _segments(dirs: list[Path], topic: str) -> list[BatchInfo]:
    """The record batches of partition 0 of `topic`, from its log segments."""
    for root in dirs:
        partition = root / f"{topic}-0"
        if partition.is_dir():
            return segment_batches(partition)
    raise AssertionError(f"no segment directory of {topic}-0 under {dirs}")


def _stored(batches: list[BatchInfo], first: int) -> tuple[int, int, int]:
    """(bytes, records, batches) of the batches from offset `first` on."""
    kept = [b for b in batches if b.base_offset >= first]
    return sum(b.size for b in kept), sum(b.records for b in kept), len(kept)


def _produce_raw_zstd(
    bootstrap: str, topic: str, records: list[Record], fill: int, level: int = 3
) -> None:
    """`records` as they came (key, value, timestamp), producer zstd at `level`, `fill`
    records a batch."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "compression.type": "zstd",
            "compression.level": str(level),
            "batch.num.messages": str(fill),
            "linger.ms": "1000",
        }
    )
    for r in records:
        producer.produce(topic, r.value, r.key, 0, timestamp=r.timestamp)
        producer.poll(0)
    assert producer.flush(30) == 0


def _records(values: list[bytes]) -> list[Record]:
    """`values` as records of partition 0 without key or headers, one timestamp (now)."""
    now = int(time.time() * 1000)
    return [Record("", 0, i, None, v, (), now) for i, v in enumerate(values)]


def _trickle(bootstrap: str, topic: str, values: list[bytes]) -> None:
    """`values` one at a time: each delivered before the next is produced."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": "0"})
    for i, value in enumerate(values):
        producer.produce(topic, value, b"user-%04d" % i, 0)
        assert producer.flush(10) == 0
        time.sleep(0.02)


def _trained(store: Path, topic: str, seed: int, tmp_path: Path) -> Dictionary:
    """`topic`'s active dictionary, trained with the CLI on 5,000 generated events."""
    train_dictionary(store, topic, list(generate("product_viewed", 5_000, seed=seed)), tmp_path)
    dictionary = DictionaryStore(store).active(topic)
    assert dictionary is not None
    return dictionary


def _relay_in_auto_mode(
    sidecar: StartSidecar,
    make_topic: MakeTopic,
    tmp_path: Path,
    seed: int,
    group: str,
    env: Mapping[str, str] | None = None,
) -> tuple[str, Dictionary, Sidecar]:
    """A relay in output mode auto on a new one-partition topic, with `env` on top, and the
    dictionary the CLI trained for the topic (`seed`) in the relay's local store."""
    topic = make_topic(1)
    store = tmp_path / "dictionaries"
    dictionary = _trained(store, topic, seed, tmp_path)
    relay = sidecar(
        "run",
        *("--input-topic", topic, "--create-topics", "--dictionaries", str(store)),
        *("--group-id", f"zdict-it-{group}-{uuid.uuid4().hex[:12]}"),
        env={
            "ZDICT_PRODUCER__STATISTICS_INTERVAL_MS": STATISTICS_MS,
            "ZDICT_CODEC__OUTPUT_MODE": "auto",
            "ZDICT_TRAINING__ENABLED": "false",
            "ZDICT_REGISTRY__ENABLED": "false",
            **(env or {}),
        },
    )
    return topic, dictionary, relay


def test_the_relay_writes_frames_at_one_record_a_batch_and_raw_values_at_full_batches(
    sidecar: StartSidecar,
    make_topic: MakeTopic,
    produce_events: ProduceEvents,
    consume_all: ConsumeAll,
    kafka_admin: AdminClient,
    kafka_bootstrap: str,
    tmp_path: Path,
) -> None:
    started = time.monotonic()
    dirs = log_dirs(kafka_admin)
    topic, dictionary, relay = _relay_in_auto_mode(sidecar, make_topic, tmp_path, 901, "outmode")
    crossover = dictionary.meta.output_crossover("zstd")
    assert crossover is not None and crossover < 256, dictionary.meta.raw_crossover
    relay.wait_for_event("partitions_assigned", timeout=30)
    output = f"{topic}.zd"

    # 1. One record at a time: batches of one record, frames.
    _trickle(kafka_bootstrap, topic, list(generate("product_viewed", TRICKLE, seed=11)))
    trickled = consume_all(output, TRICKLE, timeout=30)
    assert len(trickled) == TRICKLE
    assert all(r.headers and r.headers[-1][0] == "zd" for r in trickled)
    assert not relay.events("output_mode_changed")

    # 2. Full speed: the statistics show full batches, the partition switches to raw.
    produce_events(topic, WARM_UP, seed=12)
    switch = relay.wait_for_event("output_mode_changed", timeout=30)
    assert (switch["partition"], switch["mode"], switch["codec"]) == (0, "raw", "zstd")
    assert switch["fill"] > crossover
    assert len(consume_all(output, TRICKLE + WARM_UP, timeout=60)) == TRICKLE + WARM_UP
    scraped = relay.metrics()
    labels = frozenset({("topic", output), ("partition", "0"), ("mode", "raw")})
    assert scraped[("zdict_output_mode", labels)] == 1

    # 3. Measured: every record raw (no header of ours), as the input had it.
    sent = produce_events(topic, MEASURED, seed=13)
    out = consume_all(output, TRICKLE + WARM_UP + MEASURED, timeout=60)
    measured = out[TRICKLE + WARM_UP :]
    assert len(measured) == MEASURED
    assert [r.value for r in measured] == [r.value for r in sent]
    assert all(not any(k == "zd" for k, _ in r.headers) for r in measured)
    # Counted all the same, under outcome raw.
    counted = relay.metrics()
    encode = frozenset({("topic", topic), ("op", "encode")})
    assert counted[("zdict_records_total", frozenset({*encode, ("outcome", "raw")}))] >= MEASURED
    total = sum(v for (name, labels), v in counted.items() if name == "zdict_records_total")
    assert total == TRICKLE + WARM_UP + MEASURED  # every record relayed, raw ones included

    # What the broker stores: the relay's raw output against producer zstd at the same fill.
    ours, records, batches = _stored(_segments(dirs, output), TRICKLE + WARM_UP)
    assert records == MEASURED
    fill = max(1, round(records / batches))
    comparison = make_topic(1)
    _produce_raw_zstd(kafka_bootstrap, comparison, measured, fill)
    theirs, their_records, their_batches = _stored(_segments(dirs, comparison), 0)
    assert their_records == MEASURED
    print(
        f"\noutput mode: crossover {crossover} records/batch; relay at fill "
        f"{records / batches:.0f}: {ours / records:.1f} B/record; raw + producer zstd at fill "
        f"{their_records / their_batches:.0f}: {theirs / their_records:.1f} B/record"
    )
    assert ours <= TOLERANCE * theirs

    # At one record a batch the frames stored less than raw values with producer zstd.
    trickle_batches = [b for b in _segments(dirs, output) if b.base_offset < TRICKLE]
    assert sum(b.records for b in trickle_batches) == TRICKLE
    assert len(trickle_batches) >= 0.9 * TRICKLE  # (nearly) one record a batch
    single = make_topic(1)
    inputs = consume_all(topic, TRICKLE, timeout=30)[:TRICKLE]  # the trickled ones
    _produce_raw_zstd(kafka_bootstrap, single, inputs, 1)
    raw_single, raw_records, _ = _stored(_segments(dirs, single), 0)
    assert raw_records == TRICKLE
    frames_single = sum(b.size for b in trickle_batches)
    print(
        f"one record a batch: frames {frames_single / TRICKLE:.1f} B/record, raw + producer "
        f"zstd {raw_single / TRICKLE:.1f} B/record; {time.monotonic() - started:.0f} s"
    )
    assert frames_single < raw_single


def _mode(metrics: CollectorRegistry, topic: str, mode: str) -> float | None:
    labels = {"topic": topic, "partition": "0", "mode": mode}
    return metrics.get_sample_value("zdict_producer_output_mode", labels)


def test_the_in_process_producer_stores_no_more_than_the_better_of_frames_and_raw(
    make_topic: MakeTopic,
    kafka_admin: AdminClient,
    kafka_bootstrap: str,
    tmp_path: Path,
) -> None:
    dirs = log_dirs(kafka_admin)
    topic = make_topic(1)
    store = tmp_path / "dictionaries"
    train_dictionary(store, topic, list(generate("product_viewed", 5_000, seed=901)), tmp_path)
    dictionary = DictionaryStore(store).active(topic)
    assert dictionary is not None and dictionary.meta.output_crossover("zstd") is not None
    values = list(generate("product_viewed", TRICKLE + WARM_UP + MEASURED, seed=21))

    # One record a batch: every value a frame, fewer bytes than raw values with zstd.
    metrics = CollectorRegistry()
    base = {"bootstrap.servers": kafka_bootstrap, "compression.type": "zstd"}
    single = ZdictProducer(
        base | {"linger.ms": "0", "statistics.interval.ms": STATISTICS_MS},
        encoder=Encoder(dictionary),
        metrics=ProducerMetrics(metrics),
    )
    for value in values[:TRICKLE]:
        single.produce(topic, value, partition=0)
        assert single.flush(10) == 0
        time.sleep(0.02)
    assert _mode(metrics, topic, "frames") == 1
    single.close()
    frames_bytes, frames_records, frames_batches = _stored(_segments(dirs, topic), 0)
    assert frames_records == frames_batches == TRICKLE
    raw_single = make_topic(1)
    _produce_raw_zstd(kafka_bootstrap, raw_single, _records(values[:TRICKLE]), 1)
    raw_bytes, _, _ = _stored(_segments(dirs, raw_single), 0)
    assert frames_bytes <= TOLERANCE * min(frames_bytes, raw_bytes)

    # Full batches (128 records): the statistics switch the partition to raw values.
    metrics = CollectorRegistry()
    full = ZdictProducer(
        base | {"linger.ms": "1000", "batch.num.messages": "128", "statistics.interval.ms": "200"},
        encoder=Encoder(dictionary),
        metrics=ProducerMetrics(metrics),
    )
    warm_up = values[TRICKLE : TRICKLE + WARM_UP]
    for value in warm_up:
        full.produce(topic, value, partition=0)
        full.poll(0)
    assert full.flush(30) == 0
    deadline = time.monotonic() + 10
    while _mode(metrics, topic, "raw") != 1 and time.monotonic() < deadline:
        full.poll(0.1)
    assert _mode(metrics, topic, "raw") == 1
    measured = values[TRICKLE + WARM_UP :]
    for value in measured:
        full.produce(topic, value, partition=0)
        full.poll(0)
    assert full.flush(30) == 0
    full.close()
    ours, records, batches = _stored(_segments(dirs, topic), TRICKLE + WARM_UP)
    assert records == MEASURED
    comparison = make_topic(1)
    _produce_raw_zstd(kafka_bootstrap, comparison, _records(measured), round(records / batches))
    theirs, _, _ = _stored(_segments(dirs, comparison), 0)
    print(
        f"\nin-process producer: one record a batch {frames_bytes / TRICKLE:.1f} B/record "
        f"(raw + zstd {raw_bytes / TRICKLE:.1f}); at fill {records / batches:.0f} "
        f"{ours / records:.1f} B/record (raw + zstd {theirs / records:.1f})"
    )
    assert ours <= TOLERANCE * theirs


def test_the_relays_full_batches_store_the_chosen_batch_levels_saving(
    sidecar: StartSidecar,
    make_topic: MakeTopic,
    produce_events: ProduceEvents,
    consume_all: ConsumeAll,
    kafka_admin: AdminClient,
    kafka_bootstrap: str,
    tmp_path: Path,
) -> None:
    started = time.monotonic()
    dirs = log_dirs(kafka_admin)
    topic, dictionary, relay = _relay_in_auto_mode(
        sidecar,
        make_topic,
        tmp_path,
        941,
        "level",
        {
            "ZDICT_PRODUCER__BATCH_NUM_MESSAGES": str(LEVEL_FILL),
            "ZDICT_PRODUCER__LINGER_MS": "1000",
        },
    )
    level = dictionary.meta.batch_level
    assert level is not None and level > 3, dictionary.meta
    chosen = relay.wait_for_event("batch_level", timeout=30)
    assert (chosen["chosen_level"], chosen["zstd_level"], chosen["set_by_user"]) == (
        level,
        level,
        False,
    )
    relay.wait_for_event("partitions_assigned", timeout=30)
    scraped = relay.metrics()
    assert scraped[("zdict_batch_compression_level", frozenset({("topic", topic)}))] == level
    output = f"{topic}.zd"

    produce_events(topic, LEVEL_RECORDS, seed=942)
    switch = relay.wait_for_event("output_mode_changed", timeout=60)
    assert (switch["mode"], switch["codec"]) == ("raw", "zstd")
    assert len(consume_all(output, LEVEL_RECORDS, timeout=60)) == LEVEL_RECORDS

    sent = produce_events(topic, LEVEL_RECORDS, seed=943)
    measured = consume_all(output, 2 * LEVEL_RECORDS, timeout=60)[LEVEL_RECORDS:]
    assert [r.value for r in measured] == [r.value for r in sent]
    assert all(not any(k == "zd" for k, _ in r.headers) for r in measured)
    ours, records, _ = _stored(_segments(dirs, output), LEVEL_RECORDS)
    assert records == LEVEL_RECORDS

    # The same records with producer zstd at the chosen level and at the default one.
    at_level, at_default = make_topic(1), make_topic(1)
    _produce_raw_zstd(kafka_bootstrap, at_level, measured, LEVEL_FILL, level)
    _produce_raw_zstd(kafka_bootstrap, at_default, measured, LEVEL_FILL)
    theirs_level, n_level, _ = _stored(_segments(dirs, at_level), 0)
    theirs_default, n_default, _ = _stored(_segments(dirs, at_default), 0)
    assert n_level == n_default == LEVEL_RECORDS
    print(
        f"\nbatch level {level}: relay {ours / records:.2f} B/record, producer zstd at level "
        f"{level} {theirs_level / records:.2f}, at level 3 {theirs_default / records:.2f} "
        f"({ours / theirs_default:.3f}x); {time.monotonic() - started:.0f} s"
    )
    assert ours <= LEVEL_TOLERANCE * theirs_level
    assert theirs_level <= (1 - MIN_GAIN) * theirs_default
    assert ours <= (1 - MIN_GAIN) * theirs_default


@pytest.mark.parametrize("guarantee", ["at-least-once", "exactly-once"])
def test_a_dictionary_activated_with_another_batch_level_while_the_relay_runs_takes_effect(
    guarantee: str,
    sidecar: StartSidecar,
    cli: RunCli,
    make_topic: MakeTopic,
    produce_events: ProduceEvents,
    consume_all: ConsumeAll,
    kafka_admin: AdminClient,
    kafka_bootstrap: str,
    tmp_path: Path,
) -> None:
    """The producer replaced at level L once flushed and committed (exactly once: after a
    transaction commit, its successor fencing it); what follows stores producer zstd at L,
    nothing lost or duplicated."""
    started = time.monotonic()
    dirs = log_dirs(kafka_admin)
    topic = make_topic(1)
    store = tmp_path / "dictionaries"
    chosen = _trained(store, topic, 941, tmp_path)
    level = chosen.meta.batch_level
    assert level is not None and level > 3, chosen.meta
    at_3 = DictionaryStore(store).add_copy(chosen, batch_level=3)
    DictionaryStore(store).activate(topic, at_3.id)
    env = {
        "ZDICT_PRODUCER__STATISTICS_INTERVAL_MS": STATISTICS_MS,
        "ZDICT_PRODUCER__BATCH_NUM_MESSAGES": str(LEVEL_FILL),
        "ZDICT_PRODUCER__LINGER_MS": "1000",
        "ZDICT_CODEC__OUTPUT_MODE": "auto",
        "ZDICT_TRAINING__ENABLED": "false",
        "ZDICT_REGISTRY__ENABLED": "false",
    }
    relay = sidecar(
        "run",
        *("--input-topic", topic, "--create-topics", "--dictionaries", str(store)),
        *("--group-id", f"zdict-it-relevel-{uuid.uuid4().hex[:12]}"),
        *("--guarantee", guarantee),
        env=env,
    )
    assert relay.wait_for_event("batch_level", timeout=30)["zstd_level"] == 3
    output = f"{topic}.zd"
    produce_events(topic, LEVEL_RECORDS, seed=942)
    assert relay.wait_for_event("output_mode_changed", timeout=60)["mode"] == "raw"
    assert len(consume_all(output, LEVEL_RECORDS, timeout=60)) == LEVEL_RECORDS

    DictionaryStore(store).activate(topic, chosen.id)
    changed = relay.wait_for_event("batch_level_changed", timeout=30)
    assert (changed["from_level"], changed["to_level"]) == (3, level)
    scraped = relay.metrics()
    assert scraped[("zdict_batch_compression_level", frozenset({("topic", topic)}))] == level

    sent = produce_events(topic, LEVEL_RECORDS, seed=943)
    measured = consume_all(output, 2 * LEVEL_RECORDS, timeout=60)[LEVEL_RECORDS:]
    assert [r.value for r in measured] == [r.value for r in sent]
    assert all(not any(k == "zd" for k, _ in r.headers) for r in measured)
    # The data batches after the change (exactly once, transaction markers are batches too).
    kept = [
        b
        for b in _segments(dirs, output)
        if b.base_offset >= measured[0].offset and b.codec == "zstd"
    ]
    ours, records = sum(b.size for b in kept), sum(b.records for b in kept)
    assert records == LEVEL_RECORDS
    fill = round(records / len(kept))
    at_level, at_default = make_topic(1), make_topic(1)
    _produce_raw_zstd(kafka_bootstrap, at_level, measured, fill, level)
    _produce_raw_zstd(kafka_bootstrap, at_default, measured, fill)
    theirs_level, _, _ = _stored(_segments(dirs, at_level), 0)
    theirs_default, _, _ = _stored(_segments(dirs, at_default), 0)

    relay.stop()
    verified = cli(
        "verify",
        *("--input", topic, "--exactly-once", "--json", "--no-registry"),
        *("--dictionaries", str(store)),
        env=env,
    )
    report = json.loads(verified.stdout)
    print(
        f"\n{guarantee}: batch level 3 -> {level} while running: at fill {fill} relay "
        f"{ours / records:.2f} B/record, producer zstd at {level} {theirs_level / records:.2f}, "
        f"at 3 {theirs_default / records:.2f} ({ours / theirs_default:.3f}x); verify {report}; "
        f"{time.monotonic() - started:.0f} s"
    )
    assert verified.returncode == 0, verified.stdout.decode() + verified.stderr.decode()
    assert ours <= LEVEL_TOLERANCE * theirs_level
    assert ours <= (1 - MIN_GAIN) * theirs_default
