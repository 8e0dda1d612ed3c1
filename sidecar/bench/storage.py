"""`zdict-sidecar bench storage`: bytes as a real broker stores them, against producer compression.

The same generated messages are produced to fresh topics, each variant to its own:

* (a) raw, `compression.type=none`, and (b) raw with producer `zstd` and `lz4`, at batch fills
  of 1 … 128 records per partition (librdkafka's `batch.num.messages`, with a `linger.ms` long
  enough that every batch fills; every record has the same timestamp, so sizes are exact and
  deterministic);
* (c) through a real sidecar (`zdict-sidecar run`, its dictionary trained on the events of the
  same stream just before the measured ones), its output topic as its own producer writes it,
  without and with producer zstd on top
  (`ZDICT_PRODUCER__COMPRESSION_TYPE=zstd`); and its output records produced again at each
  fill, like the raw ones, so both sides are compared at the same fill.

Bytes are what the broker wrote: the record batches in the topic's log segments, read from its
data directory (`--data-dir`; the local broker's for `make bench`), which also gives the
achieved fill (records per batch). The broker's CPU time per variant comes from
`/proc/<pid>/stat` when its pid is known. Sizes do not vary between runs; the broker's CPU is
the median of the measured runs after a warm-up run.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Final, cast

from confluent_kafka import TopicPartition
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

from sidecar.bench.codec import time_relay
from sidecar.errors import InputError
from sidecar.kafka import plain_admin, plain_consumer, plain_producer
from sidecar.record_batch import crossover, segment_batches, stored_bytes
from sidecar.wire.record_batch import BatchInfo, Record

#: Records per batch and partition (librdkafka `batch.num.messages`).
FILLS: Final = (1, 2, 4, 8, 16, 128)
#: Producer codecs next to `none`.
CODECS: Final = ("none", "zstd", "lz4")
#: One timestamp for every record (ms; taken when the bench starts): timestamp deltas stay 0,
#: so sizes are deterministic. A fixed date would do for the bytes, but the broker's time-based
#: retention (7 days by default) deletes records stamped further back while they are measured.
TIMESTAMP_MS: Final = int(time.time() * 1000)
#: Events of the same stream before the measured ones that train the sidecar's dictionary
#: (80%; the rest is its held-out set), as the relay trains on its topic's recent traffic.
TRAINING_EVENTS: Final = 25_000
#: Long enough for every batch to fill before it is sent (flush sends the last ones).
LINGER_MS: Final = 1000


@dataclass(slots=True)
class Variant:
    """One produced variant: what the broker stored, and its CPU while it was produced."""

    name: str
    source: str  # "raw" or "sidecar"
    codec: str
    fill_setting: int | None  # batch.num.messages; None: the sidecar's own producer
    messages: int = 0
    stored_bytes: int = 0
    batches: int = 0
    predicted_bytes: int | None = None  # record_batch's exact size (compression none)
    broker_cpu_seconds: list[float] = field(default_factory=list)

    @property
    def bytes_per_message(self) -> float:
        return self.stored_bytes / self.messages if self.messages else 0.0

    @property
    def fill(self) -> float:
        """Achieved records per batch, from the segments."""
        return self.messages / self.batches if self.batches else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "source": self.source,
            "codec": self.codec,
            "fill_setting": self.fill_setting,
            "messages": self.messages,
            "stored_bytes": self.stored_bytes,
            "bytes_per_message": self.bytes_per_message,
            "batches": self.batches,
            "achieved_fill": self.fill,
            "predicted_bytes": self.predicted_bytes,
            "broker_cpu_seconds": self.broker_cpu_seconds,
        }


def process_cpu(pid: int | None) -> float | None:
    """User + system CPU seconds of process `pid` so far (None when unknown or unreadable)."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    # After the command: state is field 3, utime and stime are fields 14 and 15 (1-based).
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Storage:
    """The broker under measurement: its address, data directory and pid."""

    def __init__(self, bootstrap: str, data_dir: Path, pid: int | None, partitions: int) -> None:
        if not data_dir.is_dir():
            raise InputError(f"broker data directory {data_dir} does not exist (--data-dir)")
        self.bootstrap, self.data_dir, self.pid, self.partitions = (
            bootstrap,
            data_dir,
            pid,
            partitions,
        )
        self.admin = plain_admin(bootstrap)
        self.run_id = uuid.uuid4().hex[:6]
        self.topics: list[str] = []

    def topic(self, name: str) -> str:
        topic = f"bench-storage-{self.run_id}-{name}"
        futures = self.admin.create_topics([NewTopic(topic, num_partitions=self.partitions)])
        for future in futures.values():
            future.result(30)
        self.topics.append(topic)
        return topic

    def batches(self, topic: str) -> list[BatchInfo]:
        """Every record batch of `topic` in the broker's segments."""
        out: list[BatchInfo] = []
        for p in range(self.partitions):
            directory = self.data_dir / f"{topic}-{p}"
            if not directory.is_dir():
                raise InputError(
                    f"{directory} is not there: is {self.data_dir} the data directory of the "
                    f"broker at {self.bootstrap}? (--data-dir)"
                )
            out.extend(segment_batches(directory))
        return out

    def delete_all(self) -> None:
        if self.topics:
            for future in self.admin.delete_topics(self.topics, operation_timeout=30).values():
                future.result(60)


def produce(
    bootstrap: str,
    topic: str,
    records: Sequence[Record],
    partitions: int,
    codec: str,
    fill: int,
) -> None:
    """Produce `records` round-robin over the partitions, in batches of `fill` per partition."""
    producer = plain_producer(
        bootstrap,
        {
            "compression.type": codec,
            "batch.num.messages": fill,
            "linger.ms": LINGER_MS,
            "queue.buffering.max.messages": max(100_000, len(records) + 1),
            "enable.idempotence": True,
        },
    )
    failures: list[str] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    for i, (value, headers) in enumerate(records):
        producer.produce(
            topic,
            value=value,
            headers=cast(Any, list(headers)) or None,
            partition=i % partitions,
            timestamp=TIMESTAMP_MS,
            on_delivery=delivered,
        )
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120) or failures:
        raise InputError(f"bench storage: producing to {topic} failed: {failures[:3]}")


def read_records(bootstrap: str, topic: str, partitions: int, count: int) -> list[Record]:
    """`count` records of `topic` (value and headers), in partition-interleaved order."""
    consumer = plain_consumer(
        bootstrap, f"bench-storage-{uuid.uuid4().hex}", {"enable.auto.commit": False}
    )
    by_partition: list[list[Record]] = [[] for _ in range(partitions)]
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    deadline = time.monotonic() + 120
    got = 0
    try:
        while got < count and time.monotonic() < deadline:
            for msg in consumer.consume(10_000, 1.0):
                if msg.error() is not None:
                    continue
                headers = cast(list[tuple[str, bytes | None]], msg.headers() or [])
                by_partition[cast(int, msg.partition())].append((msg.value(), headers))
                got += 1
    finally:
        consumer.close()
    if got < count:
        raise InputError(f"bench storage: read {got} of {count} records from {topic}")
    # Back into the round-robin order the raw records were produced in.
    out: list[Record] = []
    for i in range(max(map(len, by_partition))):
        out.extend(part[i] for part in by_partition if i < len(part))
    return out


@dataclass(slots=True)
class StorageResults:
    kind: str
    messages: int
    raw_bytes: int
    variants: list[Variant]
    settings: dict[str, Any]

    def find(self, source: str, codec: str, fill: int | None) -> Variant:
        for v in self.variants:
            if (v.source, v.codec, v.fill_setting) == (source, codec, fill):
                return v
        raise KeyError((source, codec, fill))

    def fills(self) -> list[int]:
        return sorted({v.fill_setting for v in self.variants if v.fill_setting is not None})

    def crossover(self, codec: str, ours: Variant | None = None) -> float | None:
        """Fill at which raw `codec` stores no more bytes than the sidecar's records at the same
        fill (or than the `ours` variant at every fill)."""
        fills = self.fills()
        theirs = [self.find("raw", codec, f).bytes_per_message for f in fills]
        mine = [
            ours.bytes_per_message if ours else self.find("sidecar", "none", f).bytes_per_message
            for f in fills
        ]
        return crossover(fills, mine, theirs)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "messages": self.messages,
            "raw_value_bytes": self.raw_bytes,
            "variants": [v.to_dict() for v in self.variants],
            "crossover": {codec: self.crossover(codec) for codec in CODECS if codec != "none"},
            "settings": self.settings,
        }


def _measure(
    storage: Storage,
    variant: Variant,
    runs: int,
    expected: int,
    produce_once: Callable[[str], None],
) -> None:
    """Produce the variant `runs + 1` times into one topic; bytes and batches of one run (they
    are identical in every run), the broker's CPU of each measured run."""
    topic = storage.topic(variant.name)
    for run in range(runs + 1):
        before = process_cpu(storage.pid)
        produce_once(topic)
        after = process_cpu(storage.pid)
        if run and before is not None and after is not None:
            variant.broker_cpu_seconds.append(after - before)
    batches = _all_batches(storage, topic, expected * (runs + 1))
    variant.messages = expected
    variant.stored_bytes = sum(b.size for b in batches) // (runs + 1)
    variant.batches = round(len(batches) / (runs + 1))


def _all_batches(storage: Storage, topic: str, records: int) -> list[BatchInfo]:
    """The batches of `topic` once its segments hold all `records` (acknowledged writes are
    in the segment files at once; this guards against reading the wrong directory)."""
    deadline = time.monotonic() + 10
    while True:
        batches = storage.batches(topic)
        found = sum(b.records for b in batches)
        if found == records:
            return batches
        if time.monotonic() > deadline:
            raise InputError(
                f"bench storage: the segments of {topic} in {storage.data_dir} hold {found} "
                f"records, {records} were acknowledged"
            )
        time.sleep(0.2)


def bench_storage(
    bootstrap: str,
    data_dir: Path,
    *,
    pid: int | None,
    kind: str,
    count: int,
    partitions: int,
    runs: int,
    fills: Sequence[int] = FILLS,
    progress: Callable[[str], None] = print,
) -> StorageResults:
    """Measure every variant (see the module); the raw and re-produced sidecar records are
    produced from this process, the sidecar runs as `zdict-sidecar run`."""
    from sidecar.bench.events import generate
    from sidecar.dictionaries.store import DictionaryStore
    from sidecar.training.choice import train
    from sidecar.training.params import TrainingParams
    from sidecar.training.promotion import promote
    from sidecar.training.split import split_ordered

    storage = Storage(bootstrap, data_dir, pid, partitions)
    # The sidecar trains on its topic's own recent traffic: here the events just before the
    # measured ones, of the same stream.
    events = list(generate(kind, TRAINING_EVENTS + count, seed=7))
    raw: list[Record] = [(v, ()) for v in events[TRAINING_EVENTS:]]
    raw_bytes = sum(len(cast(bytes, v)) for v, _ in raw)
    variants: list[Variant] = []
    try:
        # (c) first: the sidecar's output, which the re-produced rows need.
        source = storage.topic("input")
        produce(bootstrap, source, raw, partitions, "none", 128)
        store = Path(tempfile.mkdtemp(prefix="zdict-bench-storage-"))
        samples = split_ordered(events[:TRAINING_EVENTS], 0.8)
        report = train(samples, TrainingParams(), namespace=source)
        promote(DictionaryStore(store), None, report, window="bench", parent_id=None)
        encoded: list[Record] = []
        for codec in CODECS:
            name = f"sidecar output, its producer, {codec}"
            progress(f"bench storage: {name} ...")
            variant = Variant(f"sidecar-own-{codec}", "sidecar", codec, None)
            output = f"{source}.{codec}"
            before = process_cpu(pid)
            time_relay(
                bootstrap,
                source,
                partitions,
                count,
                name,
                store,
                1,
                pass_through=False,
                output=output,
                env={
                    "ZDICT_PRODUCER__COMPRESSION_TYPE": codec,
                    "ZDICT_TRAINING__ENABLED": "false",
                },
            )
            after = process_cpu(pid)
            if before is not None and after is not None:
                variant.broker_cpu_seconds.append(after - before)
            storage.topics.append(output)
            batches = _all_batches(storage, output, count)
            variant.messages = sum(b.records for b in batches)
            variant.stored_bytes = sum(b.size for b in batches)
            variant.batches = len(batches)
            variants.append(variant)
            if codec == "none":
                encoded = read_records(bootstrap, output, partitions, count)
        # (a), (b) and the sidecar's records at the same fills.
        for fill in fills:
            for src, records in (("raw", raw), ("sidecar", encoded)):
                for codec in CODECS:
                    variant = Variant(f"{src}-{codec}-{fill}", src, codec, fill)
                    progress(f"bench storage: {src} records, {codec}, {fill} per batch ...")

                    _measure(
                        storage,
                        variant,
                        runs,
                        len(records),
                        partial(
                            produce,
                            bootstrap,
                            records=records,
                            partitions=partitions,
                            codec=codec,
                            fill=fill,
                        ),
                    )
                    if codec == "none":
                        per_partition = [records[p::partitions] for p in range(partitions)]
                        variant.predicted_bytes = sum(
                            stored_bytes(part, fill) for part in per_partition
                        )
                    variants.append(variant)
    finally:
        storage.delete_all()
    settings = {
        "kind": kind,
        "count": count,
        "partitions": partitions,
        "runs": runs,
        "fills (batch.num.messages)": list(fills),
        "linger.ms": LINGER_MS,
        "timestamp": f"one for every record: {TIMESTAMP_MS} ms",
        "data_dir": str(data_dir),
        "broker_pid": pid,
        "sidecar": "zdict-sidecar run, training off, its dictionary trained on the 20,000 events "
        "of the same stream before the measured ones; its producer's defaults (linger.ms 5)",
    }
    return StorageResults(kind, count, raw_bytes, variants, settings)


def median_cpu(variant: Variant, messages: int) -> float | None:
    """The broker's CPU seconds per million messages, median of the runs (None: unknown)."""
    if not variant.broker_cpu_seconds:
        return None
    return statistics.median(variant.broker_cpu_seconds) / (messages / 1e6)


def plot(results: StorageResults, path: Path) -> Path:
    """Ratio (raw value bytes / stored bytes) against the batch fill, the crossover marked."""
    from sidecar.tools.charts import figure

    fig = figure(figsize=(9, 5.5), layout="constrained")
    ax = fig.subplots()
    fills = results.fills()
    styles = {
        ("raw", "none"): ("raw, compression none", "grey", "--"),
        ("raw", "zstd"): ("raw, producer zstd", "tab:blue", "-"),
        ("raw", "lz4"): ("raw, producer lz4", "tab:cyan", "-"),
        ("sidecar", "none"): ("sidecar records, compression none", "tab:red", "-"),
        ("sidecar", "zstd"): ("sidecar records + producer zstd", "tab:orange", "-"),
        ("sidecar", "lz4"): ("sidecar records + producer lz4", "tab:pink", ":"),
    }
    for (src, codec), (label, color, style) in styles.items():
        ratios = [results.raw_bytes / results.find(src, codec, f).stored_bytes for f in fills]
        ax.plot(fills, ratios, style, color=color, marker="o", label=label)
    own = results.find("sidecar", "none", None)
    ax.axhline(
        results.raw_bytes / own.stored_bytes,
        color="tab:red",
        linestyle="--",
        linewidth=1,
        label=f"sidecar output as its own producer wrote it ({own.fill:.0f} records/batch)",
    )
    at = results.crossover("zstd")
    if at is not None:
        ax.axvline(at, color="black", linewidth=1, linestyle=":")
        ax.annotate(
            f"crossover: producer zstd\nwins from ~{at:.1f} records/batch",
            (at, ax.get_ylim()[0]),
            xytext=(6, 6),
            textcoords="offset points",
            va="bottom",
            fontsize=9,
        )
    ax.set_xscale("log", base=2)
    ax.set_xticks(fills, [str(f) for f in fills])
    ax.set_xlabel("records per batch and partition (producer batch fill)")
    ax.set_ylabel("raw value bytes / bytes the broker stored")
    ax.set_title(
        f"{results.messages:,} {results.kind} events as the broker stores them (log segments, "
        "record framing and batch headers included)",
        fontsize=10,
    )
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=9)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path
