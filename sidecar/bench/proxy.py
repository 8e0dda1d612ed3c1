"""`zdict-sidecar bench proxy`: the proxy (`proxy`) next to the broker
directly, in one interleaved run.

On a real broker, with `kind` events (~112 B `product_viewed` by default), one proxy
(`zdict-sidecar proxy --no-registry --no-training`, `ZDICT_CODEC__OUTPUT_MODE=auto`,
its dictionary trained first on a warm-up stream) is measured; a second one with
`ZDICT_CODEC__OUTPUT_MODE=frames` only writes the per-record frames the bytes are compared with,
and the records the Fetch part reads:

* **produce, unthrottled**: `count` events produced as fast as one confluent-kafka producer can
  (idempotent, acks=all, linger.ms=5, no client compression) over `partitions` partitions,
  directly and through the proxy: records/s, and the proxy's CPU seconds
  (`/proc/<pid>/stat`: its threads, not a training child), hence its CPU µs per record and
  records per proxy CPU second (target ≥ 100,000);
* **latency at 5,000 records/s, librdkafka** (producer zstd, `partitions` partitions, small
  compressed batches): each record's time from `produce()` to its delivery report, p50/p99,
  directly and through the proxy, and the proxy's CPU µs per record meanwhile;
* **Java producer-perf-test at 5,000 records/s** (issue 26's client and its request shape:
  Kafka's `ProducerPerformance` through `kafka_local`'s `tools`, `seconds` worth of records
  of `PAYLOADS` events picked at random, the first 2 s of them (at most half) a warm-up,
  linger.ms=5, acks=all, Java's defaults otherwise: the sticky partitioner over the topic's
  partitions, no compression), directly and through the proxy: Java's records/s, p50 and p99
  (whole ms) of the steady state, and the proxy's CPU µs per record over the whole run, warm-up
  included (targets: ≤ 10 µs, p50 +≤ 1 ms, p99 +≤ 5 ms); the JVM's CPU is not counted;
* **fetch, decoded**: one consumer reading `count` records as the frames proxy stored them
  (their batches as one unthrottled producer fills them), directly (frames) and through the
  proxy (decoded): records/s and records decoded per proxy CPU second (target ≥ 150,000);
* **bytes stored per record** (with `data_dir`, the broker's log directory): at client fills
  `fills` (librdkafka `batch.num.messages`, a linger long enough that every batch fills, one
  timestamp for every record) over `partitions` and `sparse_partitions` partitions, the record
  batches the broker wrote in its log segments: raw values with producer zstd (direct), through
  the proxy, and per-record frames (through the frames proxy); the proxy's bytes over the
  smaller of the other two (target ≤ 1.03).

In the parts that produce through the proxy (produce, both 5,000 records/s parts), the proxy's
Produce requests are read from its own /metrics (`sidecar.bench.proxy_metrics`) before and after
the timed run, outside its CPU window: records ÷ requests is the records a request carried.

With the broker's pid (`broker_pid`; `--broker-pid-file`), every timed part also takes the
broker's CPU seconds: the Java part shows the broker's CPU µs per record, direct and through the
proxy, and the proxy's CPU over the broker's (direct) per round. The machine's speed moves from
one run to the next (two CPUs shared with the broker and the clients); the broker's cost,
measured in the same rounds, moves with it, and the ratio shows the proxy's cost against it.

Every part runs `runs` times after a discarded warm-up round, direct and proxy interleaved;
medians and [min-max] are reported.

**Variants** (`variants`, `--variant NAME=VALUE`; by default `ZDICT_PURE_PYTHON=1`, the compiled
modules off, `sidecar.compiled`): one more proxy each, on the same topic and dictionary, its
environment variable set; each runs the Java part beside the measured proxy in the same rounds,
so that its CPU per record sits next to the proxy's measured at the same time rather than in a
second run on another day (what compiling gains; a setting's cost). The Java part's order
(direct, proxy, each variant) turns by one every round (`rotated`): no arm always runs first,
on a cold machine, or last, after the others warmed it.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Final, TypeVar

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

from sidecar.bench import perf_test
from sidecar.bench.events import generate
from sidecar.bench.proxy_children import ProxyChild, proxies, train, variant_env
from sidecar.bench.proxy_tables import STORED_HEADERS, TIMED_HEADERS, VARIANT_PREFIX, proxy_tables
from sidecar.bench.relay import percentile
from sidecar.bench.storage import process_cpu
from sidecar.config import CodecSettings
from sidecar.errors import InputError
from sidecar.kafka import plain_admin, plain_consumer, plain_producer
from sidecar.record_batch import segment_batches
from sidecar.tools.tables import render
from sidecar.wire.record_batch import BatchInfo

#: The fixed rate of the latency part (records/s).
RATE: Final = 5000
#: Records each fixed-rate stream starts with, untimed: the client's metadata and connections.
PRIME: Final = 100
#: Events of the stream before the measured ones that the proxies' dictionaries are trained on
#: (the proxies run with --no-training: no training run takes CPU while they are measured).
WARMUP: Final = 20_000
#: Events of the stream the Java producer-perf-test picks its values from (at random).
PAYLOADS: Final = 4096
#: Client fills (records per batch) whose bytes stored are measured.
FILLS: Final = (1, 4, 16, 64, 512)
#: Batches each partition gets at each fill in the bytes part.
BATCHES: Final = 2
#: The timed parts, each direct and through the proxy.
PARTS: Final = (
    "produce, direct",
    "produce, proxy",
    "latency, direct",
    "latency, proxy",
    "java, direct",
    "java, proxy",
    "fetch, direct",
    "fetch, proxy",
)
#: The timed parts whose client produces through the proxy: their Produce requests are counted.
PRODUCED_THROUGH: Final = ("produce, proxy", "latency, proxy", "java, proxy")
#: The variants run by default: the compiled modules off (`sidecar.compiled`).
VARIANTS: Final = ("ZDICT_PURE_PYTHON=1",)
#: What the broker stores in the bytes part: the client's raw values with producer zstd, the
#: proxy's output (frames or raw per batch), per-record frames (the frames proxy's output).
STORED: Final = ("direct", "proxy", "frames")
#: The client's settings in the timed parts: librdkafka's defaults but for these.
CLIENT: Final = {"linger.ms": 5, "acks": "all", "enable.idempotence": True}
#: Seconds one `consume()` of the Fetch part waits for its 10,000 records: short, since it
#: waits that long whenever fewer are there, and a wait is no reading (at 0.5 s the direct read
#: of 200,000 records measured ~123,000 records/s in most rounds, ~730,000 in others, the
#: broker spending 0.04 CPU seconds either way).
CONSUME_WAIT_S: Final = 0.05
#: The bytes part's producers: every batch fills before it is sent (flush sends the last ones).
FILL_LINGER_MS: Final = 1000


@dataclass(slots=True)
class Part:
    """One timed part, direct or through the proxy: per measured round, what it gave."""

    name: str
    records: list[int] = field(default_factory=list)
    #: Produce requests the proxy forwarded meanwhile (its /metrics; the parts through the
    #: proxy that produce), hence records per Produce request.
    produce_requests: list[int] = field(default_factory=list)
    records_per_s: list[float] = field(default_factory=list)
    proxy_cpu_s: list[float] = field(default_factory=list)
    #: The broker's CPU seconds meanwhile (with its pid): the same run's reference for the
    #: proxy's, on the same cores at the same time.
    broker_cpu_s: list[float] = field(default_factory=list)
    p50_ms: list[float] = field(default_factory=list)
    p99_ms: list[float] = field(default_factory=list)


@dataclass(slots=True)
class Stored:
    """The bytes part at one fill and partition count, per path (`STORED`): per measured round,
    the batches the broker wrote."""

    partitions: int
    fill: int
    stored_bytes: dict[str, list[int]] = field(default_factory=lambda: {p: [] for p in STORED})
    records: dict[str, list[int]] = field(default_factory=lambda: {p: [] for p in STORED})
    batches: dict[str, list[int]] = field(default_factory=lambda: {p: [] for p in STORED})


@dataclass(slots=True)
class ProxyResults:
    settings: dict[str, Any]
    parts: dict[str, Part]
    stored: list[Stored]
    dictionary: dict[str, Any] | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "parts": {name: asdict(part) for name, part in self.parts.items()},
            "stored": [asdict(s) for s in self.stored],
            "dictionary": self.dictionary,
        }


_T = TypeVar("_T")


def rotated(runs: Sequence[_T], turn: int) -> list[_T]:
    """`runs` in the order of round `turn`: turned left by `turn`, so that over as many rounds
    as there are runs each runs once in every place."""
    shift = turn % len(runs) if runs else 0
    return [*runs[shift:], *runs[:shift]]


def variant_part(variant: str) -> str:
    """The name of the Java part of the proxy run with `variant` (`NAME=VALUE`)."""
    return VARIANT_PREFIX + variant


def _produce(
    producer: Producer,
    topic: str,
    values: Sequence[bytes],
    rate: float | None,
    on_latency: Callable[[float], None] | None = None,
    *,
    spread: int = 1,
    first_partition: int = 0,
    timestamp: int = 0,
) -> float:
    """Produce `values` round-robin over `spread` partitions from `first_partition` (at `rate`
    records/s, or as fast as possible; `timestamp` ms for every record, 0: the producer's
    clock); seconds until every one is delivered. `on_latency` gets each record's
    produce-to-delivery seconds."""
    failures: list[KafkaError] = []
    started = time.monotonic()
    for i, value in enumerate(values):
        sent = time.monotonic()

        def delivered(err: KafkaError | None, _msg: Message, sent: float = sent) -> None:
            if err is not None:
                failures.append(err)
            elif on_latency is not None:
                on_latency(time.monotonic() - sent)

        while True:
            try:
                producer.produce(
                    topic,
                    value,
                    partition=first_partition + i % spread,
                    timestamp=timestamp,
                    on_delivery=delivered,
                )
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
        if rate is not None:
            ahead = (i + 1) / rate - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)
    if producer.flush(120) or failures:
        raise InputError(f"bench proxy: producing to {topic} failed: {failures[:3]}")
    return time.monotonic() - started


def _consume(consumer: Consumer, topic: str, partitions: Sequence[int], count: int) -> float:
    """Read `count` records of `partitions` of `topic` from their start; seconds it took.

    Raises:
        InputError: an error, or no record for 30 s.
    """
    started = time.monotonic()
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    got, idle_since = 0, time.monotonic()
    while got < count:
        messages = consumer.consume(10_000, CONSUME_WAIT_S)
        if not messages and time.monotonic() - idle_since > 30:
            raise InputError(f"bench proxy: read {got:,} of {count:,} records of {topic} in 30 s")
        for message in messages:
            error = message.error()
            if error is not None:
                raise InputError(f"bench proxy: reading {topic} failed: {error}")
        got += len(messages)
        idle_since = time.monotonic() if messages else idle_since
    return time.monotonic() - started


def _decoded(consumer: Consumer, header_key: str) -> bool:
    """Whether the next record `consumer` reads carries no `header_key` header (decoded)."""
    for _ in range(20):
        message = consumer.poll(1.0)
        if message is not None and message.error() is None:
            headers = message.headers() or []
            keys = headers.keys() if isinstance(headers, dict) else [k for k, _ in headers]
            return header_key not in keys
    raise InputError("bench proxy: no record to check the decoding on")


def _batches(data_dir: Path, topic: str, partitions: int) -> dict[int, list[BatchInfo]]:
    """The record batches of `topic`'s first `partitions` partitions, from the segments."""
    out = {}
    for p in range(partitions):
        directory = data_dir / f"{topic}-{p}"
        if not directory.is_dir():
            raise InputError(
                f"{directory} is not there: is {data_dir} the data directory of the broker the "
                "bench produces to? (--data-dir)"
            )
        out[p] = segment_batches(directory)
    return out


class _Run:
    """One run of the benchmark: its topics, proxies and stream; fills `parts` and `stored`."""

    def __init__(
        self,
        bootstrap: str,
        data_dir: Path | None,
        stream: Iterator[bytes],
        settings: dict[str, Any],
        header_key: str,
        log: Callable[[str], None],
        kafka_local: Path,
        broker_pid: int | None,
    ) -> None:
        self.bootstrap, self.data_dir, self.stream, self.log = bootstrap, data_dir, stream, log
        self.kafka_local = kafka_local
        self.broker_pid = broker_pid
        self.payloads: Path | None = None
        self.settings, self.header_key = settings, header_key
        self.count: int = settings["count"]
        self.partitions: int = settings["partitions"]
        run_id = uuid.uuid4().hex[:6]
        # One topic per path, with enough partitions for every part: one namespace per proxy
        # (its dictionary trained once), the bytes of each part counted as the batches it
        # added. The frames topic holds the Fetch part's records on partitions of their own.
        self.topics = {path: f"bench-proxy-{run_id}-{path}" for path in STORED}
        spread_max = max(self.partitions, settings["sparse_partitions"])
        self.fetch_partitions = list(range(spread_max, spread_max + self.partitions))
        self.parts = {name: Part(name) for name in PARTS}
        self.variants: list[str] = settings["variants"]
        self.parts.update({variant_part(v): Part(variant_part(v)) for v in self.variants})
        self.stored = [
            Stored(s, f)
            for s in (self.partitions, settings["sparse_partitions"])
            for f in settings["fills"]
        ]
        self.timestamp = int(time.time() * 1000)
        self.measured = False
        #: Java parts run so far: how far their order turns (`rotated`).
        self.java_rounds = 0

    def values(self, n: int) -> list[bytes]:
        return [next(self.stream) for _ in range(n)]

    def topic_partitions(self) -> dict[str, int]:
        spread_max = self.fetch_partitions[0]
        return {
            t: spread_max + (self.partitions if path == "frames" else 0)
            for path, t in self.topics.items()
        }

    @contextlib.contextmanager
    def window(self, proxy: ProxyChild, name: str, records: int) -> Iterator[Part]:
        """Around one timed part's run: the proxy's CPU seconds meanwhile and, through the proxy
        when it produces, its Produce requests, kept with `records` when measured."""
        # /metrics is read outside the CPU window: serving it costs the proxy CPU too.
        counts = name in PRODUCED_THROUGH or name.startswith(VARIANT_PREFIX)
        requests = proxy.produce_requests() if counts else 0
        broker = process_cpu(self.broker_pid)
        cpu = proxy.cpu()
        part = self.parts[name]
        yield part
        cpu_s = proxy.cpu() - cpu
        broker_after = process_cpu(self.broker_pid)
        if self.measured:
            part.records.append(records)
            part.proxy_cpu_s.append(cpu_s)
            if broker is not None and broker_after is not None:
                part.broker_cpu_s.append(broker_after - broker)
            if counts:
                part.produce_requests.append(proxy.produce_requests() - requests)

    def timed(self, proxy: ProxyChild, name: str, records: int, run: Callable[[], float]) -> Part:
        """Run one timed part in its `window`, its records/s kept when measured."""
        with self.window(proxy, name, records) as part:
            took = run()
        if self.measured:
            part.records_per_s.append(records / took)
        return part

    def fetch_source(self, frames: ProxyChild) -> None:
        """The records the Fetch part reads, written once through the frames proxy."""
        producer = plain_producer(frames.address, {**CLIENT, "compression.type": "none"})
        _produce(
            producer,
            self.topics["frames"],
            self.values(self.count),
            None,
            spread=self.partitions,
            first_partition=self.fetch_partitions[0],
        )

    def round(
        self, proxy: ProxyChild, frames: ProxyChild, variants: Sequence[ProxyChild], label: str
    ) -> None:
        self.produce(proxy, label)
        self.latency(proxy, label)
        self.java(proxy, variants, label)
        self.fetch(proxy, label)
        if self.data_dir is not None:
            self.bytes_stored(proxy, frames, label)

    def produce(self, proxy: ProxyChild, label: str) -> None:
        values = self.values(self.count)
        self.log(f"{label}: {self.count:,} events unthrottled, direct, then through the proxy")
        for name, address, topic in (
            ("produce, direct", self.bootstrap, self.topics["direct"]),
            ("produce, proxy", proxy.address, self.topics["proxy"]),
        ):
            producer = plain_producer(address, {**CLIENT, "compression.type": "none"})
            run = partial(_produce, producer, topic, values, None, spread=self.partitions)
            self.timed(proxy, name, self.count, run)

    def latency(self, proxy: ProxyChild, label: str) -> None:
        seconds = self.settings["seconds"]
        fixed = self.values(int(RATE * seconds))
        self.log(
            f"{label}: {RATE:,} records/s for {seconds:g} s over {self.partitions} partitions, "
            "direct, then through the proxy"
        )
        for name, address, topic in (
            ("latency, direct", self.bootstrap, self.topics["direct"]),
            ("latency, proxy", proxy.address, self.topics["proxy"]),
        ):
            producer = plain_producer(address, {**CLIENT, "compression.type": "zstd"})
            # Metadata and connections first, untimed.
            _produce(producer, topic, fixed[:PRIME], None, spread=self.partitions)
            latencies: list[float] = []
            run = partial(
                _produce, producer, topic, fixed[PRIME:], RATE, latencies.append,
                spread=self.partitions,
            )  # fmt: skip
            part = self.timed(proxy, name, len(fixed) - PRIME, run)
            if self.measured:
                part.p50_ms.append(percentile(latencies, 0.5) * 1000)
                part.p99_ms.append(percentile(latencies, 0.99) * 1000)

    def write_payloads(self, path: Path) -> None:
        """`PAYLOADS` events of the stream, the Java tool's values: one a line."""
        values = self.values(PAYLOADS)
        if any(b"\n" in value for value in values):
            raise InputError(f"bench proxy: a {self.settings['kind']} event holds a newline")
        path.write_bytes(b"\n".join(values))
        self.payloads = path

    def java(self, proxy: ProxyChild, variants: Sequence[ProxyChild], label: str) -> None:
        assert self.payloads is not None
        java = self.settings["java"]
        records, warmup = java["records"], java["warmup_records"]
        runs = rotated(
            [
                ("java, direct", proxy, self.bootstrap),
                ("java, proxy", proxy, proxy.address),
                *(
                    (variant_part(v), p, p.address)
                    for v, p in zip(self.variants, variants, strict=True)
                ),
            ],
            self.java_rounds,
        )
        self.java_rounds += 1
        self.log(
            f"{label}: Java producer-perf-test, {records:,} records at {RATE:,} records/s "
            f"({warmup:,} of them a warm-up): " + ", then ".join(name for name, _, _ in runs)
        )
        for name, measured, address in runs:
            # Every record sent, warm-up included (`perf_test.parse_summary` checks that all
            # were): the proxy handled them all.
            topic = self.topics["direct" if name == "java, direct" else "proxy"]
            with self.window(measured, name, records) as part:
                summary = perf_test.run(
                    self.kafka_local, address, topic, records, RATE, self.payloads, warmup
                )
            if self.measured:
                part.records_per_s.append(summary.records_per_s)
                part.p50_ms.append(summary.p50_ms)
                part.p99_ms.append(summary.p99_ms)

    def fetch(self, proxy: ProxyChild, label: str) -> None:
        self.log(f"{label}: {self.count:,} stored records read, directly, then through the proxy")
        topic = self.topics["frames"]
        for name, address in (("fetch, direct", self.bootstrap), ("fetch, proxy", proxy.address)):
            consumer = plain_consumer(
                address,
                f"bench-proxy-{uuid.uuid4().hex}",
                {"enable.auto.commit": False, "auto.offset.reset": "earliest"},
            )
            try:
                run = partial(_consume, consumer, topic, self.fetch_partitions, self.count)
                self.timed(proxy, name, self.count, run)
                if name == "fetch, proxy" and not self.measured:
                    # Once, after the warm-up's timing: what the client got was decoded.
                    consumer.assign([TopicPartition(topic, self.fetch_partitions[0], 0)])
                    if not _decoded(consumer, self.header_key):
                        raise InputError(
                            f"bench proxy: records read through the proxy still carry the "
                            f"{self.header_key!r} header: not decoded (see the proxy's log)"
                        )
            finally:
                consumer.close()

    def bytes_stored(self, proxy: ProxyChild, frames: ProxyChild, label: str) -> None:
        fills = ", ".join(map(str, self.settings["fills"]))
        self.log(
            f"{label}: bytes stored at fills {fills} over {self.partitions} and "
            f"{self.settings['sparse_partitions']} partitions, direct, through the proxy, "
            "through the frames proxy"
        )
        for entry in self.stored:
            values = self.values(entry.fill * entry.partitions * self.settings["batches"])
            for path, address in (
                ("direct", self.bootstrap),
                ("proxy", proxy.address),
                ("frames", frames.address),
            ):
                self.store(entry, path, address, values)

    def store(self, entry: Stored, path: str, address: str, values: list[bytes]) -> None:
        """One fill at one partition count, produced by one path: its batches (when measured)."""
        assert self.data_dir is not None
        topic, spread = self.topics[path], entry.partitions
        before = _batches(self.data_dir, topic, spread)
        producer = plain_producer(
            address,
            {
                "compression.type": "zstd",
                "batch.num.messages": entry.fill,
                "linger.ms": FILL_LINGER_MS,
                "queue.buffering.max.messages": max(100_000, len(values) + 1),
                "enable.idempotence": True,
            },
        )
        _produce(producer, topic, values, None, spread=spread, timestamp=self.timestamp)
        if not self.measured:
            return
        after = _batches(self.data_dir, topic, spread)
        new = [b for p, got in after.items() for b in got[len(before[p]) :]]
        entry.stored_bytes[path].append(sum(b.size for b in new))
        entry.records[path].append(sum(b.records for b in new))
        entry.batches[path].append(len(new))


def bench_proxy(
    bootstrap: str,
    data_dir: Path | None,
    *,
    kind: str = "product_viewed",
    count: int = 200_000,
    seconds: float = 10.0,
    partitions: int = 4,
    sparse_partitions: int = 64,
    fills: Sequence[int] = FILLS,
    batches: int = BATCHES,
    runs: int = 3,
    kafka_local: Path = perf_test.KAFKA_LOCAL,
    broker_pid: int | None = None,
    variants: Sequence[str] = VARIANTS,
    log: Callable[[str], None] = print,
) -> ProxyResults:
    """Run the benchmark (see module); `data_dir` is the broker's log directory (None: bytes
    are not measured), `kafka_local` the script the Java tool runs through, `broker_pid` the
    broker's process (its CPU, the reference next to the proxy's; None: not measured),
    `variants` the proxies run beside it in the Java part (`NAME=VALUE` each, see module)."""
    perf_test.kafka_local(kafka_local)
    for variant in variants:  # told before anything starts
        variant_env(variant)
    if data_dir is not None and not data_dir.is_dir():
        raise InputError(f"broker data directory {data_dir} does not exist (--data-dir)")
    java_records = int(RATE * seconds)
    settings = {
        "kind": kind,
        "count": count,
        "rate": RATE,
        "seconds": seconds,
        "partitions": partitions,
        "sparse_partitions": sparse_partitions,
        "fills": list(fills),
        "batches": batches,
        "runs": runs,
        "client": CLIENT,
        "java": {
            "records": java_records,
            "warmup_records": perf_test.warmup_records(java_records, RATE),
            "payloads": PAYLOADS,
            "client": {"linger.ms": 5, "acks": "all"},
        },
        "warmup": WARMUP,
        "data_dir": str(data_dir) if data_dir else None,
        "broker_pid": broker_pid,
        "variants": list(variants),
    }
    stored_records = sum(f * s * batches for f in fills for s in (partitions, sparse_partitions))
    per_round = count + int(RATE * seconds) + (stored_records if data_dir else 0)
    stream = generate(kind, WARMUP + PAYLOADS + count + per_round * (runs + 1), seed=7)
    # The proxies run without the caller's ZDICT_ settings: the default header.
    run = _Run(
        bootstrap,
        data_dir,
        stream,
        settings,
        CodecSettings().header_key,
        log,
        kafka_local,
        broker_pid,
    )
    admin = plain_admin(bootstrap)
    node_ids = sorted(admin.list_topics(timeout=30).brokers)
    new_topics = [NewTopic(t, num_partitions=n) for t, n in run.topic_partitions().items()]
    for future in admin.create_topics(new_topics).values():
        future.result(30)
    try:
        with tempfile.TemporaryDirectory(prefix="bench-proxy-") as tmp_name:
            tmp = Path(tmp_name)
            log(f"dictionaries for the proxies' topics, trained on {WARMUP:,} events of the stream")
            sample = tmp / "sample.txt"
            sample.write_bytes(b"\n".join(run.values(WARMUP)) + b"\n")
            for path in ("proxy", "frames"):
                train(tmp / "dictionaries", sample, run.topics[path])
            run.write_payloads(tmp / "payloads.txt")
            with proxies(bootstrap, tmp, run.topics, node_ids, variants) as started:
                proxy, frames, others, loaded = started
                log(f"the Fetch part's {count:,} records, through the frames proxy")
                run.fetch_source(frames)
                for round_ in range(runs + 1):
                    run.measured = round_ > 0
                    label = f"round {round_}" if run.measured else "warm-up round"
                    run.round(proxy, frames, others, label)
    finally:
        for future in admin.delete_topics(list(run.topics.values()), operation_timeout=30).values():
            with contextlib.suppress(Exception):  # best effort: the bench's own topics
                future.result(60)
    dictionary = json.loads(loaded)
    return ProxyResults(
        settings,
        run.parts,
        run.stored if data_dir else [],
        {k: dictionary.get(k) for k in ("dict_id", "heldout_ratio")},
    )


def format_results(results: ProxyResults) -> str:
    """`bench proxy`'s tables (FIGURES.md's, `sidecar.bench.proxy_tables`): produce, latency
    and fetch with the proxy's CPU; bytes stored."""
    settings = results.settings
    tables = proxy_tables({"settings": settings, "results": results.to_dict()})
    timed = render(
        TIMED_HEADERS,
        tables.timed,
        f"{settings['count']:,} {settings['kind']} events, {settings['partitions']} partitions, "
        "each client idempotent, acks=all, linger.ms=5; median [min–max] of the measured rounds",
    )
    if not tables.stored:
        return timed + "\n\n(bytes stored: not measured without --data-dir)"
    stored = render(
        STORED_HEADERS,
        tables.stored,
        "Bytes stored per record (the log segments' record batches); proxy / smaller: target "
        "≤ 1.03",
    )
    return "\n\n".join([timed, stored])
