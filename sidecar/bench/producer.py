"""`zdict-sidecar bench producer`: what compressing in the producer's process costs each
`produce()` call, and what the broker then stores, next to a plain producer in the same run.

For each record size (~100 B product_viewed events, ~500 B orders):

* a dictionary is trained on 25,000 events of the stream (the project's own training), and
  published to a registry topic of the run's own on the broker, as a trainer would;
* a `ZdictProducer` follows that registry (its `FollowingEncoder`, with the producer metrics
  on), and a plain `confluent_kafka.Producer` is its baseline: same configuration (producer
  zstd, linger 100 ms, a queue that never fills), same events, same topic;
* after a warm-up round of each, `runs` rounds alternate plain, plain with a `zd` header on
  every record, and zdict, each timing `count` `produce()` calls in the calling thread (wall
  clock: what the application waits; and the thread's CPU time) and flushing outside the timed
  part; the added µs is the zdict round minus the plain round before it, the header's share
  the header round minus the plain one (librdkafka's header handling: no Python of ours), and
  the encoding's share what the producer's metrics counted
  (`zdict_producer_encode_duration_seconds`), and under it zstd alone: the encoder's
  `compress` of each value, timed in the same round;
* bytes as the broker stores them at 1, 2, 4, 8, 16 records per batch are computed exactly
  with `sidecar.record_batch` (Kafka's v2 batch format, which `bench storage` checks against a
  broker's segments): the raw values with and without producer zstd, and the records as the
  zdict producer sent them (its frames and `zd` header), with and without zstd on top; a
  batch that zstd would not shrink counts uncompressed, as librdkafka sends it. Keys are null
  and every record has one timestamp, as in `bench storage`.
"""

from __future__ import annotations

import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Final

from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]  # public, not in __all__
from prometheus_client import CollectorRegistry

from sidecar.bench.events import generate
from sidecar.codec import Encoder
from sidecar.config import KafkaSettings, RegistrySettings, Settings
from sidecar.dictionaries.registry import Registry
from sidecar.dictionaries.store import DictionaryStore
from sidecar.errors import RegistryUnavailable, TrainingError
from sidecar.kafka import plain_admin, plain_producer
from sidecar.record_batch import producer_codecs, stored_bytes
from sidecar.serde import ZdictProducer
from sidecar.serde.following import FollowingEncoder
from sidecar.serde.metrics import ProducerMetrics
from sidecar.tools.tables import render
from sidecar.training.choice import train
from sidecar.training.params import TrainingParams
from sidecar.training.promotion import promote
from sidecar.training.split import split_ordered
from sidecar.wire.record_batch import Record

#: The record sizes measured: (label, event kind).
KINDS: Final = (("~100 B", "product_viewed"), ("~500 B", "order"))
#: Records per batch for the stored bytes.
FILLS: Final = (1, 2, 4, 8, 16)
#: Events before the measured ones that train the dictionary (80 %; the rest held out).
TRAINING_EVENTS: Final = 25_000
#: Records whose stored bytes are computed (sizes are exact; more only takes longer).
STORED_RECORDS: Final = 20_000
#: The producers' configuration, both of them: batches compressed with zstd as most are.
PRODUCER_CONFIG: Final = {"linger.ms": "100", "compression.type": "zstd", "acks": "all"}
#: Seconds to wait for the producer's follower to have the published dictionary.
READY_SECONDS: Final = 30.0


@dataclass(slots=True)
class SizeResult:
    """One record size: the timings of every measured round, and the stored bytes."""

    label: str
    kind: str
    mean_bytes: float
    dict_id: int
    heldout_ratio: float
    #: µs per produce() call, per measured round (wall clock in the calling thread).
    plain_us: list[float] = field(default_factory=list)
    #: ... of the plain producer sending each value with a `zd` header: the header's own cost.
    header_us: list[float] = field(default_factory=list)
    zdict_us: list[float] = field(default_factory=list)
    #: The calling thread's CPU µs per call, per round.
    plain_cpu_us: list[float] = field(default_factory=list)
    zdict_cpu_us: list[float] = field(default_factory=list)
    #: µs of encoding per call in each zdict round (the producer metrics' count).
    encode_us: list[float] = field(default_factory=list)
    #: µs per value of zstd alone in each round: the encoder's `compress` (python-zstandard's
    #: compress() with the dictionary, no skip rule), the floor under the encoding.
    zstd_us: list[float] = field(default_factory=list)
    #: fill -> variant ("raw none", "raw zstd", "zdict none", "zdict zstd") -> bytes a record.
    stored: dict[int, dict[str, float]] = field(default_factory=dict)

    @property
    def added_us(self) -> list[float]:
        """Per round: the zdict round's µs minus the plain round's before it."""
        return [z - p for p, z in zip(self.plain_us, self.zdict_us, strict=True)]

    @property
    def added_cpu_us(self) -> list[float]:
        return [z - p for p, z in zip(self.plain_cpu_us, self.zdict_cpu_us, strict=True)]

    @property
    def header_added_us(self) -> list[float]:
        """Per round: what a `zd` header alone adds to a plain produce() call (librdkafka's
        header handling), the part of `added_us` no Python can save."""
        return [h - p for p, h in zip(self.plain_us, self.header_us, strict=True)]


@dataclass(slots=True)
class ProducerResults:
    count: int
    runs: int
    fills: tuple[int, ...]
    sizes: list[SizeResult]

    @property
    def settings(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "runs": self.runs,
            "fills": list(self.fills),
            "producer": PRODUCER_CONFIG,
            "training_events": TRAINING_EVENTS,
            "stored_records": min(self.count, STORED_RECORDS),
        }

    def to_dict(self) -> list[dict[str, Any]]:
        return [
            asdict(size)
            | {
                "added_us": size.added_us,
                "added_cpu_us": size.added_cpu_us,
                "header_added_us": size.header_added_us,
                "stored": {str(k): v for k, v in size.stored.items()},
            }
            for size in self.sizes
        ]


def bench_producer(
    bootstrap: str,
    *,
    count: int,
    runs: int,
    fills: Sequence[int] = FILLS,
    progress: Callable[[str], None] = print,
) -> ProducerResults:
    """Measure every record size (see the module); topics of the run's own, deleted after."""
    admin = plain_admin(bootstrap)
    run_id = uuid.uuid4().hex[:8]
    registry_topic = f"_zdict_bench_producer-{run_id}"
    topics = [registry_topic]
    settings = Settings(
        kafka=KafkaSettings.model_validate({"bootstrap.servers": bootstrap}),
        registry=RegistrySettings(topic=registry_topic, create=True),
    )
    registry = Registry.open(settings, "bench")
    sizes: list[SizeResult] = []
    try:
        for label, kind in KINDS:
            topic = f"bench-producer-{run_id}-{kind}"
            futures = admin.create_topics([NewTopic(topic, num_partitions=1)])
            for future in futures.values():
                future.result(30)
            topics.append(topic)
            progress(f"bench producer: {label} ({kind}) ...")
            sizes.append(
                _measure(bootstrap, registry, topic, label, kind, count, runs, fills, progress)
            )
    finally:
        registry.close()
        for future in admin.delete_topics(topics, operation_timeout=30).values():
            future.result(60)
    return ProducerResults(count=count, runs=runs, fills=tuple(fills), sizes=sizes)


def _measure(
    bootstrap: str,
    registry: Registry,
    topic: str,
    label: str,
    kind: str,
    count: int,
    runs: int,
    fills: Sequence[int],
    progress: Callable[[str], None],
) -> SizeResult:
    events = list(generate(kind, TRAINING_EVENTS + count, seed=11))
    values = events[TRAINING_EVENTS:]
    report = train(split_ordered(events[:TRAINING_EVENTS], 0.8), TrainingParams(), namespace=topic)
    if report.dictionary is None:
        raise TrainingError(f"bench producer: no dictionary for {kind}: {report.reason}")
    with tempfile.TemporaryDirectory(prefix="zdict-bench-producer-") as store:
        dictionary = promote(
            DictionaryStore(store), registry, report, window="bench producer", parent_id=None
        )
    collectors = CollectorRegistry()
    metrics = ProducerMetrics(collectors)
    config = {
        "bootstrap.servers": bootstrap,
        "queue.buffering.max.messages": str(2 * count + 1000),
        **PRODUCER_CONFIG,
    }
    encoders = FollowingEncoder.connect(
        bootstrap, topic=registry.topic, namespaces=[topic], on_read=metrics.registry_read
    )
    deadline = time.monotonic() + READY_SECONDS
    while encoders.dictionary(topic) != dictionary:
        if time.monotonic() > deadline:
            encoders.close()
            raise RegistryUnavailable(
                f"bench producer: the producer did not read dictionary {dictionary.id} from "
                f"registry topic {registry.topic} within {READY_SECONDS:.0f} s"
            )
        time.sleep(0.1)
    plain = plain_producer(bootstrap, config)
    # Frames on every record: what compressing in the process costs (the output mode would
    # send raw values once the statistics show full batches, and mix both into the figures).
    zdict = ZdictProducer(config, encoder=encoders, metrics=metrics, output_mode="frames")
    result = SizeResult(
        label=label,
        kind=kind,
        mean_bytes=statistics.fmean(map(len, values)),
        dict_id=dictionary.id,
        heldout_ratio=dictionary.meta.heldout_ratio,
    )

    def encoding() -> tuple[float, float]:
        """(seconds, records) of encoding so far, as the producer metrics export them."""
        labels = {"topic": topic}
        return (
            collectors.get_sample_value("zdict_producer_encode_duration_seconds_sum", labels)
            or 0.0,
            collectors.get_sample_value("zdict_producer_encode_duration_seconds_count", labels)
            or 0.0,
        )

    try:
        for run in range(runs + 1):  # the first is the warm-up
            plain_us, plain_cpu = _round(plain, topic, values)
            header_us, _ = _round(plain, topic, values, [encoders.encoder(topic).header])
            zstd_us = _zstd_round(encoders.encoder(topic), values)
            before = encoding()
            zdict_us, zdict_cpu = _round(zdict, topic, values)
            after = encoding()
            if run == 0:
                continue
            result.plain_us.append(plain_us)
            result.header_us.append(header_us)
            result.zdict_us.append(zdict_us)
            result.plain_cpu_us.append(plain_cpu)
            result.zdict_cpu_us.append(zdict_cpu)
            result.encode_us.append((after[0] - before[0]) / (after[1] - before[1]) * 1e6)
            result.zstd_us.append(zstd_us)
            progress(f"  run {run}: produce() {plain_us:.2f} µs, ZdictProducer {zdict_us:.2f} µs")
        encoder = encoders.encoder(topic)
        sent: list[Record] = [encoder.encode(v) for v in values[:STORED_RECORDS]]
        result.stored = stored_per_record([(v, ()) for v in values[:STORED_RECORDS]], sent, fills)
    finally:
        zdict.close()
        plain.flush(60)
        encoders.close()
    return result


def _round(
    producer: Any,
    topic: str,
    values: Sequence[bytes],
    headers: list[tuple[str, bytes]] | None = None,
) -> tuple[float, float]:
    """µs per `produce()` call over `values` (each with `headers`): wall clock and the calling
    thread's CPU time. The flush that follows is not timed."""
    produce = producer.produce
    started, started_cpu = time.perf_counter(), time.thread_time()
    for value in values:
        try:
            # Positional, as ZdictProducer passes its records on (keywords cost the C call more).
            produce(topic, value, None, -1, None, None, 0, headers)
        except BufferError:  # the queue is sized never to fill; should it, wait and retry
            producer.poll(0.05)
            produce(topic, value, None, -1, None, None, 0, headers)
    wall = time.perf_counter() - started
    cpu = time.thread_time() - started_cpu
    left = producer.flush(120)
    if left:
        raise RegistryUnavailable(f"bench producer: {left} records undelivered after 120 s")
    return wall / len(values) * 1e6, cpu / len(values) * 1e6


def _zstd_round(encoder: Encoder, values: Sequence[bytes]) -> float:
    """µs per value of the encoder's `compress` alone (wall clock, the calling thread)."""
    compress = encoder.compress
    started = time.perf_counter()
    for value in values:
        compress(value)
    return (time.perf_counter() - started) / len(values) * 1e6


def stored_per_record(
    raw: Sequence[Record], sent: Sequence[Record], fills: Sequence[int]
) -> dict[int, dict[str, float]]:
    """Bytes a record as the broker stores it, per fill: raw and as sent, compression none
    and zstd (librdkafka's default level)."""
    zstd = producer_codecs()["zstd"]
    n = len(raw)
    return {
        fill: {
            "raw none": stored_bytes(raw, fill, None) / n,
            "raw zstd": stored_bytes(raw, fill, zstd) / n,
            "zdict none": stored_bytes(sent, fill, None) / n,
            "zdict zstd": stored_bytes(sent, fill, zstd) / n,
        }
        for fill in fills
    }


def _median_range(values: Sequence[float]) -> str:
    return f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]"


def format_producer(results: ProducerResults) -> str:
    """One table: per record size and fill, the bytes stored; per record size, the µs."""
    rows: list[list[object]] = []
    for size in results.sizes:
        for i, fill in enumerate(results.fills):
            stored = size.stored[fill]
            first = i == 0
            rows.append(
                [
                    f"{size.label} ({size.mean_bytes:.0f} B)" if first else "",
                    _median_range(size.plain_us) if first else "",
                    _median_range(size.zdict_us) if first else "",
                    _median_range(size.added_us) if first else "",
                    _median_range(size.added_cpu_us) if first else "",
                    _median_range(size.header_added_us) if first else "",
                    _median_range(size.encode_us) if first else "",
                    _median_range(size.zstd_us) if first else "",
                    fill,
                    round(stored["raw none"], 1),
                    round(stored["raw zstd"], 1),
                    round(stored["zdict none"], 1),
                    round(stored["zdict zstd"], 1),
                    f"{stored['raw zstd'] / stored['zdict zstd']:.2f}x",
                ]
            )
    title = (
        f"in-process compression (ZdictProducer, registry-following, metrics on) next to a plain "
        f"Producer: µs per produce() call, median [min-max] of {results.runs} rounds of "
        f"{results.count:,} records after a warm-up (added = zdict - plain, wall and calling "
        "thread's CPU; header = what a `zd` header alone adds to a plain produce(); encode = the "
        "compression's share, from the producer metrics; zstd = the encoder's compress() of "
        "each value alone, no skip rule: the floor under encode); bytes a "
        "record as the broker stores it at each fill (records per batch; batch header and "
        "record framing counted, keys null), raw or as the zdict producer sent it, without "
        "and with producer zstd; x = raw+zstd / zdict+zstd"
    )
    return render(
        (
            "records",
            "produce() µs",
            "ZdictProducer µs",
            "added µs",
            "added CPU µs",
            "header µs",
            "encode µs",
            "zstd µs",
            "fill",
            "raw",
            "raw+zstd",
            "zdict",
            "zdict+zstd",
            "x",
        ),
        rows,
        title,
    )
