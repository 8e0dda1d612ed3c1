"""`zdict-sidecar demo` (`make demo`): where the sidecar wins and where it steps aside, in the
bytes the broker stores, in about two minutes.

An unchanged client (librdkafka, keyed records, `linger.ms` 5, producer zstd) sends the same
generated events three ways, each to a topic of its own with `PARTITIONS` partitions: directly
without compression, directly with its zstd, and through `zdict-sidecar proxy` (a real child
process, no dictionary at the start, training on, a registry topic of its own).

1. Small batches: keyed records over many partitions at a low linger, a low-latency producer's
   batches of one or two records. The proxy samples them, trains and publishes a first
   dictionary; halfway the events' schema changes, the proxy notices (drift) and retrains.
2. Full batches: the same events again, sent as fast as they come (a long linger): batches of
   hundreds of records, above the crossover the proxy measures on the topic's latest values,
   where the batch codec alone stores less than per-record frames: the proxy writes those
   batches' values raw, and says so (fill, that crossover, records written raw).
3. A consumer reads the proxy's topic through the proxy: every value byte-exact.

Bytes are the record batches in the broker's own log segments (its `log.dirs`, read from its
configuration: the broker must run on this machine, as `make demo`'s does), between offsets
taken while every producer was flushed, so each window holds the same events in every topic.
The relay's story (`zdict-sidecar run` under a schema drift) is `demo --relay`.
"""

from __future__ import annotations

import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, cast

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import ConfigResource, NewTopic  # type: ignore[attr-defined]

from sidecar.bench.events import generate
from sidecar.bench.proxy_children import port_base
from sidecar.bench.workload import DEMO_SETTINGS, SidecarProcess, digest, free_port
from sidecar.codec import DEFAULT_HEADER_KEY
from sidecar.errors import InputError
from sidecar.kafka import plain_admin, plain_consumer, plain_producer
from sidecar.record_batch import segment_batches
from sidecar.tools.tables import render
from sidecar.wire.record_batch import BatchInfo

#: Partitions of each topic: keyed records spread over them, one or two to a batch.
PARTITIONS: Final = 16
#: Events per second each way in the small-batch act.
RATE: Final = 2000
#: The small-batch act sends 1/this of a second's events at a time: evenly, as a service's
#: requests come, not in bursts that would fill batches at a low linger.
PACE_PER_S: Final = 1000
#: The schema changes no sooner than this long after the first dictionary.
WITH_FIRST: Final = 10.0
#: The small-batch act goes on this long with the retrained dictionary ...
AFTER_RETRAIN: Final = 8.0
#: ... and waits for it this much longer than asked, at most.
LATE_BY: Final = 45.0
#: The client's linger in the small-batch act (librdkafka's default) and in the full-batch act.
SMALL_LINGER_MS: Final = 5
FULL_LINGER_MS: Final = 500
#: The three ways the same events reach the broker.
ARMS: Final = ("none", "zstd", "sidecar")
#: Events of the full-batch act (the newest events of the small-batch act, sent again).
FULL_EVENTS: Final = 30_000
#: The small-batch act's windows, by the mark that opens each.
NO_DICTIONARY: Final = "no dictionary yet (the proxy samples)"
FIRST: Final = "first dictionary"
DRIFTED: Final = "schema changed, retraining"
RETRAINED: Final = "retrained dictionary"
FULL: Final = "full batches, the same events"

#: Per topic, per partition: an offset.
Offsets = dict[str, dict[int, int]]


@dataclass(slots=True)
class Window:
    """The same events in every topic between two marks: what the broker stored of them."""

    name: str
    stored_bytes: dict[str, int] = field(default_factory=dict)
    records: dict[str, int] = field(default_factory=dict)
    batches: dict[str, int] = field(default_factory=dict)
    #: Records of the proxy's topic written raw (no header of ours) and as frames.
    raw_records: int = 0
    frame_records: int = 0

    @property
    def fill(self) -> float:
        """Records per batch of the proxy's topic (the client's batches, as it sent them)."""
        return self.records["sidecar"] / max(1, self.batches["sidecar"])

    @property
    def versus_zstd(self) -> float:
        """The sidecar's stored bytes over producer zstd's alone (below 1: saved)."""
        return self.stored_bytes["sidecar"] / max(1, self.stored_bytes["zstd"])


@dataclass(slots=True)
class DemoResult:
    """Everything the demo prints; seconds are since the first event."""

    partitions: int
    rate: int
    windows: list[Window] = field(default_factory=list)
    first_dictionary: float | None = None
    drift_at: float | None = None
    #: When the first training run after the change started, and why (`drift`: detected).
    detected: float | None = None
    trigger: str | None = None
    retrained: float | None = None
    #: The zstd crossover (records per batch) of the first dictionary, as trained ...
    first_crossover: float | None = None
    #: ... and the one that decided the full-batch act: the proxy's on the topic's latest values
    #: (its last `output_crossover` before the act ended), at the zstd level it writes them at.
    crossover: float | None = None
    crossover_level: int | None = None
    produced: int = 0
    read_back: int = 0
    exact: int = 0
    exit_code: int | None = None

    def window(self, name: str) -> Window | None:
        return next((w for w in self.windows if w.name == name), None)


def log_dirs(bootstrap: str) -> list[Path]:
    """The broker's data directories (`log.dirs`, else `log.dir`), which must be on this machine.

    Raises:
        InputError: it reports none, or they are not on this machine.
    """
    admin = plain_admin(bootstrap)
    broker = next(iter(admin.list_topics(timeout=10).brokers))
    resource = ConfigResource(ConfigResource.Type.BROKER, str(broker))
    configs = admin.describe_configs([resource])[resource].result(timeout=10)
    entry = configs.get("log.dirs") or configs.get("log.dir")
    dirs = [Path(d) for d in str(entry.value if entry else "").split(",") if d]
    if not dirs or not all(d.is_dir() for d in dirs):
        raise InputError(
            f"the demo reads the broker's log segments, and its log.dirs ({dirs or 'none'}) are "
            "not on this machine: run `make demo`, which starts a local broker"
        )
    return dirs


class Arms:
    """One client configuration, three ways: producers to the three topics, the same keys."""

    def __init__(
        self, bootstrap: str, proxy: str, topics: Mapping[str, str], linger_ms: int
    ) -> None:
        common = {"linger.ms": linger_ms, "queue.buffering.max.messages": 1_000_000}
        self.topics = topics
        self.producers: dict[str, Producer] = {
            "none": plain_producer(bootstrap, {**common, "compression.type": "none"}),
            "zstd": plain_producer(bootstrap, {**common, "compression.type": "zstd"}),
            "sidecar": plain_producer(proxy, {**common, "compression.type": "zstd"}),
        }
        self.failed: list[str] = []

    def send(self, value: bytes) -> None:
        # Keyed by a fingerprint of the value: spread over every partition whatever the schema.
        key = digest(value)
        for arm, producer in self.producers.items():
            while True:
                try:
                    producer.produce(self.topics[arm], value, key=key, on_delivery=self._delivered)
                    break
                except BufferError:
                    producer.poll(0.05)
            producer.poll(0)

    def _delivered(self, err: object, _msg: object) -> None:
        if err is not None:
            self.failed.append(str(err))

    def flush(self) -> None:
        for arm, producer in self.producers.items():
            if producer.flush(60):
                raise InputError(f"demo: the {arm} producer could not deliver within 60 s")
        if self.failed:
            raise InputError(f"demo: a record was not delivered: {self.failed[0]}")


class Broker:
    """The demo's topics on the broker: their end offsets and the batches stored between two."""

    def __init__(self, bootstrap: str, topics: Mapping[str, str]) -> None:
        self.topics = topics
        self.dirs = log_dirs(bootstrap)
        self.consumer = plain_consumer(bootstrap, f"zdict-demo-{uuid.uuid4().hex[:8]}")

    def offsets(self) -> Offsets:
        """The end offset of every partition of every topic (after the producers' flush)."""
        return {
            arm: {
                p: self.consumer.get_watermark_offsets(
                    TopicPartition(topic, p), timeout=10, cached=False
                )[1]
                for p in range(PARTITIONS)
            }
            for arm, topic in self.topics.items()
        }

    def stored(self, name: str, start: Offsets, end: Offsets) -> Window:
        """What the broker stored of each topic between `start` and `end`."""
        window = Window(name)
        for arm, topic in self.topics.items():
            kept = [
                batch
                for p in range(PARTITIONS)
                for batch in self._batches(topic, p)
                if start[arm][p] <= batch.base_offset < end[arm][p]
            ]
            window.stored_bytes[arm] = sum(b.size for b in kept)
            window.records[arm] = sum(b.records for b in kept)
            window.batches[arm] = len(kept)
        return window

    def _batches(self, topic: str, partition: int) -> list[BatchInfo]:
        for root in self.dirs:
            directory = root / f"{topic}-{partition}"
            if directory.is_dir():
                return segment_batches(directory)
        raise InputError(f"demo: no log segments of {topic}-{partition} under {self.dirs}")

    def close(self) -> None:
        self.consumer.close()


def _read(
    consumer: Consumer, topic: str, start: Mapping[int, int], end: Mapping[int, int]
) -> Iterator[Any]:
    """Every record of `topic` from `start` to `end` (per partition), through `consumer`."""
    wanted = sum(end[p] - start[p] for p in end)
    consumer.assign([TopicPartition(topic, p, start[p]) for p in end if end[p] > start[p]])
    seen, deadline = 0, time.monotonic() + 120
    while seen < wanted and time.monotonic() < deadline:
        for msg in consumer.consume(10_000, 1.0):
            partition, offset = msg.partition(), msg.offset()
            if msg.error() is not None or partition is None or offset is None:
                continue
            if offset < end[partition]:
                seen += 1
                yield msg
    consumer.unassign()


def _count_modes(bootstrap: str, topic: str, window: Window, start: Offsets, end: Offsets) -> None:
    """How the proxy wrote `window`'s records, read from the broker directly: raw values carry
    no header of ours."""
    consumer = plain_consumer(bootstrap, f"zdict-demo-{uuid.uuid4().hex[:8]}")
    try:
        for msg in _read(consumer, topic, start["sidecar"], end["sidecar"]):
            headers = cast(list[tuple[str, bytes | None]], msg.headers() or [])
            if any(key == DEFAULT_HEADER_KEY for key, _ in headers):
                window.frame_records += 1
            else:
                window.raw_records += 1
    finally:
        consumer.close()


def _since(events: Sequence[Mapping[str, Any]], start: float) -> list[float]:
    return [float(e["t"]) - start for e in events]


def run_demo(
    bootstrap: str,
    work: Path,
    *,
    seconds: float = 70.0,
    drift_after: float = 30.0,
    rate: int = RATE,
    full_events: int = FULL_EVENTS,
    progress: Callable[[str], None] = print,
) -> DemoResult:
    """The demo (see module), its figures in the result."""
    run_id = uuid.uuid4().hex[:8]
    topics = {arm: f"demo-{run_id}-{arm}" for arm in ARMS}
    admin = plain_admin(bootstrap)
    node_ids = sorted(admin.list_topics(timeout=30).brokers)
    # On the broker itself: the proxy refuses admin requests.
    created = [NewTopic(t, num_partitions=PARTITIONS) for t in topics.values()]
    for future in admin.create_topics(created).values():
        future.result(30)
    broker = Broker(bootstrap, topics)
    address = f"127.0.0.1:{free_port()}"
    env = {
        **DEMO_SETTINGS,
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "ZDICT_REGISTRY__TOPIC": f"_zdict_dictionaries-{run_id}",
        "ZDICT_PROXY__BROKER_PORT_BASE": str(port_base(node_ids)),
    }
    proxy = SidecarProcess(
        ["--listen", address, "--topic", topics["sidecar"], "--dictionaries", str(work / run_id)],
        env,
        work / f"proxy-{run_id}.log",
        name="proxy",
        command="proxy",
    )
    result = DemoResult(PARTITIONS, rate)
    try:
        while not proxy.events("proxy_listening"):
            if not proxy.running():
                raise InputError(f"demo: the proxy exited; see {proxy.log_path}")
            time.sleep(0.1)
        sent = _small_batches(
            bootstrap, address, broker, proxy, result, seconds, drift_after, rate, progress
        )
        again = sent[-full_events:]
        _full_batches(bootstrap, address, broker, proxy, result, again, progress)
        _read_through(address, topics["sidecar"], broker, result, [*sent, *again], progress)
    finally:
        result.exit_code = proxy.stop()
        broker.close()
    return result


def _small_batches(
    bootstrap: str,
    address: str,
    broker: Broker,
    proxy: SidecarProcess,
    result: DemoResult,
    seconds: float,
    drift_after: float,
    rate: int,
    progress: Callable[[str], None],
) -> list[bytes]:
    """Act 1; the events it sent, in order."""
    progress(
        f"act 1: {rate:,} product_viewed events/s for {seconds:.0f} s, keyed over {PARTITIONS} "
        f"partitions, linger.ms {SMALL_LINGER_MS}, three ways: no compression, producer zstd, "
        f"producer zstd through the proxy; the schema changes after {drift_after:.0f} s"
    )
    arms = Arms(bootstrap, address, broker.topics, SMALL_LINGER_MS)
    before = generate("product_viewed", 10_000_000, seed=42)
    after = generate("product_viewed", 10_000_000, seed=43, drift_at=0)
    marks: list[tuple[str, Offsets]] = [(NO_DICTIONARY, broker.offsets())]
    sent: list[bytes] = []
    start_wall, start = time.time(), time.monotonic()
    next_check, due = 1.0, start
    chunk = max(1, rate // PACE_PER_S)
    while (elapsed := time.monotonic() - start) < _act_end(result, seconds):
        # The schema changes once the first dictionary has been in use a while, however late a
        # loaded machine trains it.
        first = result.first_dictionary
        drifted = first is not None and elapsed >= max(drift_after, first + WITH_FIRST)
        if drifted and result.drift_at is None:
            arms.flush()
            result.drift_at = time.monotonic() - start
            marks.append((DRIFTED, broker.offsets()))
        for _ in range(chunk):
            value = next(after if drifted else before)
            arms.send(value)
            sent.append(value)
        # Behind (a loaded machine): no catching up in a burst, which would fill batches.
        due = max(due + chunk / rate, time.monotonic())
        time.sleep(max(0.0, due - time.monotonic()))
        if elapsed < next_check:
            continue
        next_check += 1.0
        loads = _since(proxy.events("dictionary_loaded"), start_wall)
        if loads and result.first_dictionary is None:
            arms.flush()
            result.first_dictionary = loads[0]
            marks.append((FIRST, broker.offsets()))
            progress(f"  t={elapsed:4.0f} s  the proxy trained its first dictionary: compressing")
        if result.drift_at is not None:
            # The first run after the change: drift detected, or the sample grown or due.
            runs = [
                (float(e["t"]) - start_wall, str(e.get("trigger")))
                for e in proxy.events("training_started")
                if float(e["t"]) - start_wall >= result.drift_at
            ]
            later = [t for t in loads if runs and t >= runs[0][0]]
            # The retrained window starts at the newest dictionary: one trained on a sample still
            # mostly of the old schema is beaten by the next (test_demo: held-out ratio 1.7, its
            # live crossover 1.2, a fifth of the records raw), and until then it is retraining.
            if later and (result.retrained is None or later[-1] > result.retrained):
                arms.flush()
                if result.retrained is None:
                    result.detected, result.trigger = runs[0]
                else:
                    marks.pop()
                result.retrained = later[-1]
                marks.append((RETRAINED, broker.offsets()))
                progress(
                    f"  t={elapsed:4.0f} s  retrained ({result.trigger}): its new dictionary active"
                )
        if int(elapsed) % 10 == 0:
            progress(f"  t={elapsed:4.0f} s  {len(sent):,} events sent each way")
    arms.flush()
    end = broker.offsets()
    for (name, opened), (_, closed) in zip(marks, [*marks[1:], ("end", end)], strict=True):
        window = broker.stored(name, opened, closed)
        if window.records["sidecar"]:
            _count_modes(bootstrap, broker.topics["sidecar"], window, opened, closed)
            result.windows.append(window)
    result.produced = len(sent)
    return sent


def _act_end(result: DemoResult, seconds: float) -> float:
    """Seconds the small-batch act lasts: `seconds`, or `AFTER_RETRAIN` past the retrained
    dictionary if that comes later (a loaded machine detects and trains later), at most
    `LATE_BY` more."""
    if result.retrained is None:
        return seconds + LATE_BY
    return min(max(seconds, result.retrained + AFTER_RETRAIN), seconds + LATE_BY)


def _full_batches(
    bootstrap: str,
    address: str,
    broker: Broker,
    proxy: SidecarProcess,
    result: DemoResult,
    events: Sequence[bytes],
    progress: Callable[[str], None],
) -> None:
    """Act 2: `events` again, as fast as they come, `FULL_LINGER_MS` linger."""
    progress(
        f"act 2: the newest {len(events):,} of those events again, as fast as they come "
        f"(linger.ms {FULL_LINGER_MS}): full batches"
    )
    promoted = [e for e in proxy.events("training_finished") if e.get("decision") == "promoted"]
    crossovers = [(e.get("raw_crossover") or {}).get("zstd") for e in promoted]
    if crossovers:
        result.first_crossover = crossovers[0]
    arms = Arms(bootstrap, address, broker.topics, FULL_LINGER_MS)
    opened = broker.offsets()
    for value in events:
        arms.send(value)
    arms.flush()
    closed = broker.offsets()
    measured = [
        e for e in proxy.events("output_crossover") if e.get("topic") == broker.topics["sidecar"]
    ]
    if measured:
        result.crossover, result.crossover_level = (
            measured[-1].get("crossover"),
            measured[-1].get("zstd_level"),
        )
    window = broker.stored(FULL, opened, closed)
    _count_modes(bootstrap, broker.topics["sidecar"], window, opened, closed)
    result.windows.append(window)
    result.produced += len(events)


def _read_through(
    address: str,
    topic: str,
    broker: Broker,
    result: DemoResult,
    sent: Sequence[bytes],
    progress: Callable[[str], None],
) -> None:
    """A consumer reads the proxy's topic through the proxy: each value must be one `sent`."""
    progress("a consumer reads the proxy's topic through the proxy")
    expected = Counter(digest(v) for v in sent)
    end = broker.offsets()["sidecar"]
    consumer = plain_consumer(address, f"zdict-demo-{uuid.uuid4().hex[:8]}")
    try:
        for msg in _read(consumer, topic, dict.fromkeys(end, 0), end):
            result.read_back += 1
            fingerprint = digest(msg.value() or b"")
            if expected[fingerprint] > 0:
                expected[fingerprint] -= 1
                result.exact += 1
    finally:
        consumer.close()


# -- what it prints ------------------------------------------------------------------------------


def _at(t: float | None) -> str:
    return "-" if t is None else f"{t:.0f} s"


def _fill(crossover: float | None) -> str:
    return "none measured" if crossover is None else f"{crossover:g} records per batch"


def format_demo(result: DemoResult) -> str:
    """The demo's closing tables: every window's stored bytes three ways, and what happened."""
    rows: list[list[object]] = [
        [
            w.name,
            f"{w.records['sidecar']:,}",
            f"{w.fill:.1f}",
            f"{w.stored_bytes['none']:,}",
            f"{w.stored_bytes['zstd']:,}",
            f"{w.stored_bytes['sidecar']:,}",
            f"{w.versus_zstd:.3f}",
            f"{w.frame_records:,} / {w.raw_records:,}",
        ]
        for w in result.windows
    ]
    stored = render(
        (
            "window",
            "records",
            "per batch",
            "none (B)",
            "producer zstd (B)",
            "through the proxy (B)",
            "proxy / zstd",
            "frames / raw",
        ),
        rows,
        "bytes the broker stored (its log segments: batch headers, record framing, our headers "
        "and the batch codec counted), the same records three ways",
    )
    lines = [stored, ""]
    small = [w for w in result.windows if w.name in (FIRST, RETRAINED)]
    for w in small:
        saved = w.stored_bytes["zstd"] - w.stored_bytes["sidecar"]
        lines.append(
            f"{w.name}, {w.fill:.1f} records per batch: through the proxy {saved:,} B fewer than "
            f"producer zstd alone ({1 - w.versus_zstd:.1%})"
        )
    lines.append(
        f"first dictionary at {_at(result.first_dictionary)} (crossover at training "
        f"{_fill(result.first_crossover)}); schema change at {_at(result.drift_at)}, training "
        f"again from {_at(result.detected)} ({result.trigger or '-'}), retrained dictionary at "
        f"{_at(result.retrained)}"
    )
    full = result.window(FULL)
    if full is not None:
        lines.append(
            f"full batches: {full.fill:.0f} records per batch; the proxy's crossover, measured on "
            f"the topic's latest values at zstd level {result.crossover_level or '-'}: "
            f"{_fill(result.crossover)} (from which raw values under the batch codec store less "
            f"than frames): the proxy wrote {full.raw_records:,} of {full.records['sidecar']:,} "
            f"records raw, {full.versus_zstd:.3f}x producer zstd's bytes"
        )
    lines.append(
        f"read through the proxy: {result.read_back:,} records, {result.exact:,} byte-exact of "
        f"{result.produced:,} sent; proxy exit code after SIGTERM {result.exit_code}"
    )
    return "\n".join(lines)


def ok(result: DemoResult) -> bool:
    """The demo's own checks: everything read back exact, the proxy stopped cleanly."""
    return result.exit_code == 0 and result.exact == result.produced == result.read_back


def main(bootstrap: str, seconds: float = 70.0, rate: int = RATE) -> int:
    work = Path(tempfile.mkdtemp(prefix="zdict-demo-"))
    print(f"demo on {bootstrap}; proxy log and dictionaries in {work}")
    result = run_demo(
        bootstrap, work, seconds=seconds, drift_after=round(seconds * 0.45), rate=rate
    )
    print()
    print(format_demo(result))
    return 0 if ok(result) else 1
