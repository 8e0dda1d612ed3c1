"""The batch level chosen at training, on the real broker: a relay whose topic's dictionary chose
a zstd level above 3 compresses its batches at that level, and where its batches fill (raw
values) its output stores what the same records store with producer zstd at that level, less
than at the producer's default level 3: log segments read as `bench storage` reads them.

The broker must run on this machine: its `log.dirs` (asked of the broker itself) are read.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from sidecar.bench.events import generate
from sidecar.dictionaries.store import DictionaryStore
from sidecar.record_batch import BatchInfo, segment_batches
from sidecar.training.batch_level import MIN_GAIN

from .launch import StartSidecar
from .log_dirs import log_dirs
from .records import ConsumeAll, ProduceEvents, Record
from .topics import MakeTopic
from .training import train_dictionary

#: Records relayed until the partition is raw, then the measured ones.
WARM_UP = 8192
MEASURED = 8192
#: Records per batch of the relay's producer (and of the comparisons).
FILL = 512
#: The relay's raw output stores at most this much more than producer zstd at the same level.
TOLERANCE = 1.02
STATISTICS_MS = "500"


def _stored(dirs: list[Path], topic: str, first: int) -> tuple[int, int]:
    """(bytes, records) of partition 0's batches of `topic` from offset `first` on."""
    for root in dirs:
        partition = root / f"{topic}-0"
        if partition.is_dir():
            kept: list[BatchInfo] = [
                b for b in segment_batches(partition) if b.base_offset >= first
            ]
            return sum(b.size for b in kept), sum(b.records for b in kept)
    raise AssertionError(f"no segment directory of {topic}-0 under {dirs}")


def _produce_zstd(bootstrap: str, topic: str, records: list[Record], level: int) -> None:
    """`records` as they came, producer zstd at `level`, `FILL` records a batch."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "compression.type": "zstd",
            "compression.level": str(level),
            "batch.num.messages": str(FILL),
            "linger.ms": "1000",
        }
    )
    for r in records:
        producer.produce(topic, r.value, r.key, 0, timestamp=r.timestamp)
        producer.poll(0)
    assert producer.flush(30) == 0


def test_the_relays_full_batches_store_the_chosen_levels_saving(
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
    topic = make_topic(1)
    store = tmp_path / "dictionaries"
    train_dictionary(store, topic, list(generate("product_viewed", 5_000, seed=941)), tmp_path)
    dictionary = DictionaryStore(store).active(topic)
    assert dictionary is not None
    level = dictionary.meta.batch_level
    assert level is not None and level > 3, dictionary.meta

    relay = sidecar(
        "run",
        *("--input-topic", topic, "--create-topics", "--dictionaries", str(store)),
        *("--group-id", f"zdict-it-level-{uuid.uuid4().hex[:12]}"),
        env={
            "ZDICT_PRODUCER__STATISTICS_INTERVAL_MS": STATISTICS_MS,
            "ZDICT_PRODUCER__BATCH_NUM_MESSAGES": str(FILL),
            "ZDICT_PRODUCER__LINGER_MS": "1000",
            "ZDICT_CODEC__OUTPUT_MODE": "auto",
            "ZDICT_TRAINING__ENABLED": "false",
            "ZDICT_REGISTRY__ENABLED": "false",
        },
    )
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

    produce_events(topic, WARM_UP, seed=942)
    switch = relay.wait_for_event("output_mode_changed", timeout=60)
    assert (switch["mode"], switch["codec"]) == ("raw", "zstd")
    assert len(consume_all(output, WARM_UP, timeout=60)) == WARM_UP

    sent = produce_events(topic, MEASURED, seed=943)
    measured = consume_all(output, WARM_UP + MEASURED, timeout=60)[WARM_UP:]
    assert [r.value for r in measured] == [r.value for r in sent]
    assert all(not any(k == "zd" for k, _ in r.headers) for r in measured)
    ours, records = _stored(dirs, output, WARM_UP)
    assert records == MEASURED

    # The same records with producer zstd at the chosen level and at the default one.
    at_level, at_default = make_topic(1), make_topic(1)
    _produce_zstd(kafka_bootstrap, at_level, measured, level)
    _produce_zstd(kafka_bootstrap, at_default, measured, 3)
    theirs_level, n_level = _stored(dirs, at_level, 0)
    theirs_default, n_default = _stored(dirs, at_default, 0)
    assert n_level == n_default == MEASURED
    print(
        f"\nbatch level {level}: relay {ours / records:.2f} B/record, producer zstd at level "
        f"{level} {theirs_level / records:.2f}, at level 3 {theirs_default / records:.2f} "
        f"({ours / theirs_default:.3f}x); {time.monotonic() - started:.0f} s"
    )
    assert ours <= TOLERANCE * theirs_level
    assert theirs_level <= (1 - MIN_GAIN) * theirs_default
    assert ours <= (1 - MIN_GAIN) * theirs_default
