"""`zdict-sidecar bench relay`: the relay at full speed and under a fixed offered load.

Per event kind (by default ~100 B `product_viewed` and ~500 B `order`), on a real broker:

* **saturation**: a topic pre-loaded with `count` events is relayed into a fresh output topic
  by each variant (the C relay: `kcat -C` piped into `kcat -P`, librdkafka without Python;
  pass-through, compress with 1 and 2 workers, the trainer on as by default, and 1 worker with
  `--no-training` and with `--guarantee exactly-once`): messages/s from the first output
  record to the last, CPU microseconds per record in the steady state (the relay's processes
  from its first output record to its last: start-up and shutdown excluded), peak RSS of the
  largest process, training runs started;
* **latency**: a fresh relay of each variant while this process produces at a fixed rate
  (`--latency-rate`, and `max`: as fast as one producer can, beyond what the relay sustains)
  and reads the output topic: end-to-end latency of each record, from its producer timestamp
  (set at `produce()`) to its arrival at an output consumer, p50/p99/max after a warm-up.

Method: every variant once per round, variants interleaved; a warm-up round
discarded; median and [min-max] of the measured rounds; ratios against pass-through and the C
relay within the run. With a `baseline` (another checkout of the package, e.g. the main branch),
every sidecar variant also runs from it, right after its own run: before/after in one run.
"""

from __future__ import annotations

import math
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Final

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from sidecar.bench.codec import RelayRun, preload, time_c_relay, time_relay
from sidecar.bench.workload import SidecarProcess, create_topic
from sidecar.errors import InputError
from sidecar.kafka import plain_consumer, plain_producer


@dataclass(frozen=True, slots=True)
class RelayVariant:
    name: str
    workers: int
    pass_through: bool
    training: bool  # the trainer runs (the default); pass-through has nothing to train on
    #: `--guarantee exactly-once` (Kafka transactions) instead of at-least-once.
    exactly_once: bool = False
    #: The directory the sidecar package is imported from (None: this one): a baseline.
    source: Path | None = None

    @property
    def first_kind_only(self) -> bool:
        """A setting apart from the defaults (no trainer, transactions): measured on the first
        event kind only, unless every kind is asked for."""
        return not self.pass_through and (not self.training or self.exactly_once)

    @property
    def trainer(self) -> str:
        if self.pass_through:
            return "off (nothing sampled)"
        return "on (default)" if self.training else "off (--no-training)"

    def env(self) -> dict[str, str]:
        """Settings of the sidecar process beyond its arguments."""
        env = {} if self.training else {"ZDICT_TRAINING__ENABLED": "false"}
        if self.source is not None:
            # Ahead of this installation; PYTHONSAFEPATH: not behind the working directory,
            # which `python -m` would otherwise put first (it may be this checkout).
            env |= {"PYTHONPATH": str(self.source), "PYTHONSAFEPATH": "1"}
        return env

    def from_source(self, source: Path) -> RelayVariant:
        """The same variant run from the package in `source` (a name of its own)."""
        return replace(self, name=f"{self.name} {BASELINE_MARK}", source=source)


#: What names a variant run from the baseline.
BASELINE_MARK: Final = "[baseline]"
#: The row of the relay without Python (`time_c_relay`).
C_RELAY: Final = "C relay (kcat -C | kcat -P)"


SATURATION: Final = (
    RelayVariant("pass-through, 1 worker", 1, True, False),
    RelayVariant("compress, 1 worker", 1, False, True),
    RelayVariant("compress, 1 worker, --no-training", 1, False, False),
    RelayVariant("compress, 2 workers", 2, False, True),
    RelayVariant("compress, 1 worker, exactly-once", 1, False, True, exactly_once=True),
)
LATENCY: Final = (
    RelayVariant("pass-through, 1 worker", 1, True, False),
    RelayVariant("compress, 1 worker", 1, False, True),
    RelayVariant("compress, 2 workers", 2, False, True),
)
#: Unthrottled, latency is the queue whatever the variant: the 1-worker ones say it.
LATENCY_AT_MAX: Final = LATENCY[:2]
#: The row the others are compared with.
PASS_THROUGH: Final = SATURATION[0].name
#: Properties of the bench's own producer and output consumer (librdkafka's defaults).
CLIENT: dict[str, Any] = {}
#: Seconds of traffic at the start of a latency run that are not measured.
WARMUP_SECONDS: Final = 2.0


def percentile(values: Sequence[float], q: float) -> float:
    """The `q`-quantile (0..1) of `values`, nearest rank: the smallest value with at least
    `q` of the values at or below it."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    rank = max(1, math.ceil(round(q * len(ordered), 9)))  # round: 0.99 * 100 is not 99.0
    return ordered[min(rank, len(ordered)) - 1]


@dataclass(slots=True)
class LatencyRun:
    """One fixed-load run: records measured and their end-to-end latency (milliseconds)."""

    variant: str
    offered: float | None  # records/s; None: as fast as the producer can
    seconds: float
    produced: int = 0
    measured: int = 0
    received: int = 0
    achieved_rate: float = 0.0  # measured records / the time they took to arrive
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    max_ms: float = 0.0
    training_runs: int = 0


def with_baseline(variants: Sequence[RelayVariant], baseline: Path | None) -> list[RelayVariant]:
    """`variants`, each followed by itself run from `baseline` (when given)."""
    if baseline is None:
        return list(variants)
    return [run for v in variants for run in (v, v.from_source(baseline))]


def _relay_args(variant: RelayVariant, topic: str, output: str, store: Path) -> list[str]:
    args = [
        *("--input-topic", topic, "--output-topic", output),
        *("--group-id", f"bench-{uuid.uuid4().hex[:8]}", "--create-topics"),
        *("--dictionaries", str(store), "--workers", str(variant.workers)),
    ]
    if variant.pass_through:
        args.append("--pass-through")
    if not variant.training:
        args.append("--no-training")
    if variant.exactly_once:
        args += ["--guarantee", "exactly-once"]
    return args


def latency_run(
    bootstrap: str,
    topic: str,
    partitions: int,
    variant: RelayVariant,
    store: Path,
    values: Sequence[bytes],
    rate: float | None,
    seconds: float,
    work: Path,
) -> LatencyRun:
    """Start the variant on `topic` (from its end), produce `values` round-robin at `rate` for
    `WARMUP_SECONDS + seconds`, read the output and measure each record after the warm-up."""
    output = f"{topic}.{uuid.uuid4().hex[:8]}"
    env = {
        **variant.env(),
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "ZDICT_REGISTRY__TOPIC": f"_zdict_dictionaries-{topic}",
        # Start at the end of the input: only this run's traffic is relayed.
        "ZDICT_CONSUMER__AUTO_OFFSET_RESET": "latest",
        # Not scraped here; with N workers, port + i may be a port a client connection holds.
        "ZDICT_METRICS__ENABLED": "false",
    }
    sidecar = SidecarProcess(
        _relay_args(variant, topic, output, store), env, work / f"{output}.log", "bench"
    )
    result = LatencyRun(variant.name, rate, seconds)
    producer = plain_producer(bootstrap, {**CLIENT, "queue.buffering.max.messages": 1_000_000})
    consumer = plain_consumer(
        bootstrap,
        f"bench-latency-{uuid.uuid4().hex}",
        {**CLIENT, "enable.auto.commit": False, "fetch.wait.max.ms": 5},
    )
    try:
        deadline = time.monotonic() + 90
        while len(sidecar.events("partitions_assigned")) < variant.workers:
            if not sidecar.running() or time.monotonic() > deadline:
                raise InputError(f"bench relay: the sidecar did not start; see {sidecar.log_path}")
            time.sleep(0.1)
        time.sleep(1.5)  # the group settles (a second worker joining rebalances it)
        consumer.assign([TopicPartition(output, p, OFFSET_BEGINNING) for p in range(partitions)])
        latencies = _drive(producer, consumer, topic, partitions, values, rate, seconds, result)
    finally:
        consumer.close()
        sidecar.stop()
    result.training_runs = len(sidecar.events("training_started"))
    if latencies:
        result.p50_ms = percentile(latencies, 0.50)
        result.p99_ms = percentile(latencies, 0.99)
        result.max_ms = max(latencies)
    return result


def _produce_until(
    producer: Producer,
    topic: str,
    partitions: int,
    values: Sequence[bytes],
    produced: int,
    due: int,
    window: tuple[int, int],
) -> tuple[int, int]:
    """Produce records `produced` up to `due` (the values in turn, the partitions round robin),
    each stamped with the time it is produced; returns `due` and how many of the records were
    stamped within `window` (ms since the epoch, end excluded)."""
    n = len(values)
    measured = 0
    while produced < due:
        stamp = int(time.time() * 1000)
        try:
            producer.produce(
                topic,
                values[produced % n],
                partition=produced % partitions,
                timestamp=stamp,
            )
        except BufferError:
            producer.poll(0.01)
            continue
        produced += 1
        if window[0] <= stamp < window[1]:
            measured += 1
    return produced, measured


def _drive(
    producer: Producer,
    consumer: Consumer,
    topic: str,
    partitions: int,
    values: Sequence[bytes],
    rate: float | None,
    seconds: float,
    result: LatencyRun,
) -> list[float]:
    """Produce on schedule and read the output in one loop; latencies (ms) of measured records."""
    start = time.monotonic()
    wall = time.time()
    measure_from = int((wall + WARMUP_SECONDS) * 1000)
    measure_to = int((wall + WARMUP_SECONDS + seconds) * 1000)
    end = WARMUP_SECONDS + seconds
    latencies: list[float] = []
    produced = measured = received = 0
    drain_until = first_seen = last_seen = 0.0
    while True:
        elapsed = time.monotonic() - start
        busy = False
        if elapsed < end:
            due = int(elapsed * rate) + 1 if rate else produced + 500
            window = (measure_from, measure_to)
            produced, due_measured = _produce_until(
                producer, topic, partitions, values, produced, due, window
            )
            measured += due_measured
            busy = True
        elif not drain_until:
            producer.flush(60)
            # What the relay has not delivered this long after the last record is reported
            # as not received (the run fails below if it is not nearly everything).
            drain_until = time.monotonic() + max(30.0, 3 * seconds)
        producer.poll(0)
        for msg in consumer.consume(10_000, 0):
            if msg.error() is not None:
                continue
            now = time.time() * 1000
            stamp = msg.timestamp()[1]
            if measure_from <= stamp < measure_to:
                latencies.append(now - stamp)
                received += 1
                first_seen = first_seen or now
                last_seen = now
            busy = True
        if drain_until and (received >= measured or time.monotonic() > drain_until):
            break
        if not busy:
            time.sleep(0.0005)
    result.produced, result.measured, result.received = produced, measured, received
    # Through the relay: measured records over the time they took to arrive, which is the
    # offered rate when the relay keeps up and the relay's own rate when it does not.
    span = (last_seen - first_seen) / 1000
    result.achieved_rate = received / span if span > 0 else 0.0
    if received < measured * 0.999:
        raise InputError(
            f"bench relay: {result.variant} delivered {received} of {measured} measured records"
        )
    return latencies


@dataclass(slots=True)
class KindResults:
    kind: str
    count: int
    mean_bytes: float
    partitions: int
    saturation: dict[str, list[RelayRun]] = field(default_factory=dict)
    latency: dict[str, list[LatencyRun]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "count": self.count,
            "mean_bytes": self.mean_bytes,
            "partitions": self.partitions,
            "saturation": {k: [asdict(r) for r in v] for k, v in self.saturation.items()},
            "latency": {k: [asdict(r) for r in v] for k, v in self.latency.items()},
        }


def _dictionary_store(kind: str, namespaces: Sequence[str]) -> Path:
    """A store whose active dictionary for each namespace is trained on other events of `kind`."""
    from sidecar.bench.events import generate
    from sidecar.dictionaries.store import DictionaryStore
    from sidecar.training.choice import train
    from sidecar.training.params import TrainingParams
    from sidecar.training.promotion import promote
    from sidecar.training.split import split_ordered

    store_dir = Path(tempfile.mkdtemp(prefix="zdict-bench-relay-"))
    store = DictionaryStore(store_dir)
    # The stream the topics are loaded from (`preload`: seed 7), its first events: what the
    # relay's own trainer would have sampled from the topic.
    samples = split_ordered(generate(kind, 25_000, seed=7), 0.8)
    for namespace in namespaces:
        report = train(samples, TrainingParams(), namespace=namespace)
        promote(store, None, report, window="bench", parent_id=None)
    return store_dir


def bench_kind(
    bootstrap: str,
    kind: str,
    count: int,
    partitions: int,
    runs: int,
    *,
    saturation: Sequence[RelayVariant] = SATURATION,
    latency: Sequence[RelayVariant] = LATENCY,
    rates: Sequence[float | None] = (20_000.0,),
    latency_seconds: float = 6.0,
    c_relay: bool = True,
    progress: Callable[[str], None] = print,
) -> KindResults:
    """Both parts for one kind; rounds interleave the variants, round 0 is the warm-up.
    `c_relay`: the C relay (`C_RELAY`) first in every round (it needs kcat)."""
    from sidecar.bench.events import generate

    stem = f"bench-relay-{kind}-{uuid.uuid4().hex[:6]}"
    topic, live = stem, f"{stem}-live"
    progress(f"bench relay: pre-loading {count:,} {kind} events ...")
    raw = preload(bootstrap, topic, kind, count, partitions)
    create_topic(bootstrap, live, partitions)
    store = _dictionary_store(kind, [topic, live])
    results = KindResults(kind, count, raw / count, partitions)
    work = Path(tempfile.mkdtemp(prefix="zdict-bench-relay-logs-"))
    values = list(generate(kind, 50_000, seed=11))
    for round_ in range(runs + 1):
        label = "warm-up round" if round_ == 0 else f"round {round_}/{runs}"
        if c_relay:
            progress(f"bench relay: {kind}, {label}: {C_RELAY}, {count:,} pre-loaded ...")
            run = time_c_relay(bootstrap, topic, partitions, count, C_RELAY)
            if round_:
                results.saturation.setdefault(C_RELAY, []).append(run)
        for variant in saturation:
            progress(f"bench relay: {kind}, {label}: {variant.name}, {count:,} pre-loaded ...")
            run = time_relay(
                bootstrap,
                topic,
                partitions,
                count,
                variant.name,
                store,
                variant.workers,
                variant.pass_through,
                env=variant.env(),
            )
            if round_:
                results.saturation.setdefault(variant.name, []).append(run)
        at_max = {v.name for v in LATENCY_AT_MAX}
        for rate in rates:
            for variant in [v for v in latency if rate or base_name(v.name) in at_max]:
                what = f"{rate:,.0f}/s" if rate else "max rate"
                progress(f"bench relay: {kind}, {label}: {variant.name}, latency at {what} ...")
                seconds = latency_seconds if rate else latency_seconds / 2
                lat = latency_run(
                    bootstrap, live, partitions, variant, store, values, rate, seconds, work
                )
                if round_:
                    results.latency.setdefault(_latency_key(variant.name, rate), []).append(lat)
    return results


def base_name(name: str) -> str:
    """A variant's name without the baseline mark."""
    return name.removesuffix(f" {BASELINE_MARK}")


def _latency_key(name: str, rate: float | None) -> str:
    return f"{name} @ {f'{rate:,.0f}/s' if rate else 'max'}"


def median_range(values: Sequence[float], fmt: str = "{:,.0f}") -> str:
    low, mid, high = min(values), statistics.median(values), max(values)
    return f"{fmt.format(mid)} [{fmt.format(low)}-{fmt.format(high)}]"


def plot(results: Sequence[KindResults], path: Path) -> Path:
    """Throughput bars with [min-max] per variant and kind, and the ×pass-through labels."""
    from sidecar.tools.charts import figure

    fig = figure(figsize=(10, 4.2 * len(results)), layout="constrained")
    axes = fig.subplots(len(results), 1, squeeze=False)[:, 0]
    for ax, kind in zip(axes, results, strict=True):
        names = list(kind.saturation)
        medians = [statistics.median(r.rate for r in kind.saturation[n]) for n in names]
        lows = [
            m - min(r.rate for r in kind.saturation[n]) for m, n in zip(medians, names, strict=True)
        ]
        highs = [
            max(r.rate for r in kind.saturation[n]) - m for m, n in zip(medians, names, strict=True)
        ]
        base = next((m for n, m in zip(names, medians, strict=True) if n == PASS_THROUGH), 1.0)
        colors = [
            "black" if n == C_RELAY else "grey" if "pass-through" in n else "tab:red" for n in names
        ]
        bars = ax.barh(names, medians, xerr=[lows, highs], color=colors, capsize=4)
        ax.bar_label(
            bars, labels=[f"{m:,.0f}  ({m / base:.2f}x)" for m in medians], padding=30, fontsize=9
        )
        ax.invert_yaxis()
        ax.set_xlabel("messages/s, median and [min-max] of the measured rounds")
        ax.set_title(
            f"relay over {kind.count:,} pre-loaded {kind.kind} events ({kind.mean_bytes:.0f} B), "
            f"{kind.partitions} partitions, broker on the same 2 cores",
            fontsize=10,
        )
        ax.set_xlim(0, max(m + h for m, h in zip(medians, highs, strict=True)) * 1.35)
        ax.grid(axis="x", alpha=0.3)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path
