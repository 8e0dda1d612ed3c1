"""`zdict-sidecar bench savings`: through the proxy, the relay and the in-process producer, on
every real corpus of this machine, the bytes the broker stores against the better of per-record
frames and the producer's zstd alone.

Per corpus (`bench.corpora`: log lines, JSON events, kilobyte snapshots), the first `SAMPLE`
values (at most half of them) are the stream's past: `zdict-sidecar train` trains the topics'
dictionary on them, as the relay's first training would (`sampling.min_messages`). The values
after them are the stream's future: at each fill (librdkafka's `batch.num.messages`, a linger
long enough that every batch fills, one timestamp, one partition) the same first `fill x
BATCHES` of them (`MIN_RECORDS` at least) are produced three ways, each to a topic of its own
created on the broker: directly with producer zstd, through a proxy writing frames always, and
through a proxy in output mode auto (the product: frames below the dictionary's crossover, raw
values from it). Bytes are the record batches the broker wrote in its log segments
(`data_dir`), batch headers, record framing, our headers and the batch codec included; they do
not vary between runs, so one run is measured. The product's figure is its bytes over the fewer
of the other two (target: at most `TARGET`).

Then the same values of each fill through a relay (`measure_relay`): produced first to an input
topic of their own (the corpus's dictionary copied to it), then relayed by one relay per fill
for every corpus at once, its producer batching that fill (`batch.num.messages`, linger 1 s,
producer zstd, statistics every 0.5 s), in output mode auto: its output topic's bytes against
the same two.

Then through the in-process producer (`measure_producer`): per corpus and fill, a
`ZdictProducer` with the corpus's dictionary (batching that fill, linger 1 s, producer zstd,
statistics every 0.1 s, output mode auto), as a long-running application would be: it first
sends `WARM_UP` of the stream's other values (those after the fill's, then from the start of
the future: its output mode and live crossover set on them, as on the stream's past), then the
fill's values, whose bytes are measured against the same two.

Beside them, in the same run, the batch codec's levels (`level_rows`): each fill's values from
16 records a batch, batched and compressed offline as librdkafka does at every level of
`LEVELS` (`training.batch_level`): stored bytes and CPU per record (measured, the fastest of
`TIMING_RUNS`), against level 3. The relay's producer compresses at the level its topic's
dictionary chose (`batch_level` per corpus), so its row over producer zstd shows what the level
saves where batches fill.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

import zstandard
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

from sidecar.bench.corpora import Corpus
from sidecar.bench.proxy_children import ProxyChild, train
from sidecar.bench.storage import LINGER_MS, TIMESTAMP_MS, produce
from sidecar.codec import Encoder
from sidecar.dictionaries.store import DictionaryStore
from sidecar.errors import InputError
from sidecar.kafka import plain_admin
from sidecar.record_batch import producer_zstd, segment_batches
from sidecar.serde import ZdictProducer
from sidecar.training.batch_level import BATCH_LEVELS, level_figures
from sidecar.wire.record_batch import records_section

#: Records per batch measured: a low-latency producer's to a saturated one's.
FILLS: Final = (1, 4, 16, 32, 64, 128, 512)
#: Values of the stream's past the dictionary is trained on (the relay's first training).
SAMPLE: Final = 2000
#: Batches produced at each fill, at least (fewer when the corpus has too few values after its
#: sample) ...
BATCHES: Final = 2
#: ... and at least this many records: a few batches of a few records are a few hundred bytes,
#: where one record's luck moves the ratio by percents.
MIN_RECORDS: Final = 512
#: The product's bytes over the better of frames and producer zstd: at most this.
TARGET: Final = 1.02
#: What the broker stores: producer zstd alone, frames always, the product (output mode auto)
#: through the proxy ...
PATHS: Final = ("direct", "frames", "proxy")
#: ... and through the relay: the same values produced to an input topic of their own, relayed
#: by a relay whose producer batches `fill` records (output mode auto).
RELAY: Final = "relay"
#: The relay's producer reports its batches this often (ms): windows within a short run.
RELAY_STATISTICS_MS: Final = "500"
#: Seconds a relay may take to relay a fill's values of every corpus.
RELAY_TIMEOUT: Final = 120.0
#: Batch levels measured offline at each fill from `LEVEL_MIN_FILL`: the levels training picks
#: among, and 19, which librdkafka does not accept (for the figure of what it would store).
LEVELS: Final = (*BATCH_LEVELS, 19)
LEVEL_MIN_FILL: Final = 16
#: Timing runs of each level's CPU (after a warm-up; the fastest counts).
TIMING_RUNS: Final = 3
#: ... and through the in-process producer (`ZdictProducer`), batching `fill` records.
PRODUCER: Final = "producer"
#: Its statistics (ms): a window, its output mode set, between the warm-up and the fill.
PRODUCER_STATISTICS_MS: Final = 100
#: Values it sends before each fill's (at least 4 batches of the fill): its output mode and
#: live crossover set as a running application's are.
WARM_UP: Final = 256
#: Seconds a producer may take to deliver a fill's values.
PRODUCER_TIMEOUT: Final = 60.0


@dataclass(slots=True)
class Fill:
    """One fill of one corpus: records and bytes the broker stored per path."""

    fill: int
    records: int
    stored_bytes: dict[str, int] = field(default_factory=dict)
    batches: dict[str, int] = field(default_factory=dict)
    #: Per batch level (offline, from `LEVEL_MIN_FILL`): stored bytes and CPU ns per record.
    levels: dict[str, dict[str, float]] = field(default_factory=dict)

    def versus_better(self, product: str = "proxy") -> float:
        """`product`'s bytes over the fewer of frames' and producer zstd's."""
        return self.stored_bytes[product] / min(
            self.stored_bytes["direct"], self.stored_bytes["frames"]
        )

    def versus_producer(self, product: str = "proxy") -> float:
        """`product`'s bytes over producer zstd's alone (below 1: saved)."""
        return self.stored_bytes[product] / self.stored_bytes["direct"]


@dataclass(slots=True)
class CorpusSavings:
    """One corpus: its shape, the sample trained on, and each fill measured."""

    corpus: str
    shape: str
    mean_bytes: float
    sample: int
    fills: list[Fill] = field(default_factory=list)
    skipped_fills: list[int] = field(default_factory=list)
    #: The zstd batch level its dictionary chose (None: none promoted, the producer's default).
    batch_level: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {
            "fills": [
                asdict(f)
                | {
                    "versus_better": round(f.versus_better(), 4),
                    "versus_producer": round(f.versus_producer(), 4),
                }
                | {
                    f"{arm}_versus_better": round(f.versus_better(arm), 4)
                    for arm in (RELAY, PRODUCER)
                    if arm in f.stored_bytes
                }
                | {
                    f"{arm}_versus_producer": round(f.versus_producer(arm), 4)
                    for arm in (RELAY, PRODUCER)
                    if arm in f.stored_bytes
                }
                for f in self.fills
            ]
        }


@dataclass(slots=True)
class Plan:
    """What one corpus produces: its sample, its future, and its topics per path."""

    corpus: Corpus
    sample: list[bytes]
    future: list[bytes]
    topics: dict[str, str]


def plan(corpus: Corpus, run_id: str) -> Plan:
    """The corpus split in its past (the sample, at most half) and its future, and its topics."""
    cut = min(SAMPLE, len(corpus.messages) // 2)
    topics = {path: f"bench-savings-{run_id}-{corpus.name}-{path}" for path in PATHS}
    return Plan(corpus, corpus.messages[:cut], corpus.messages[cut:], topics)


def _stored(data_dir: Path, topic: str) -> tuple[int, int, int]:
    """(bytes, records, batches) in the topic's one partition's log segments so far."""
    directory = data_dir / f"{topic}-0"
    if not directory.is_dir():
        raise InputError(
            f"{directory} is not there: is {data_dir} the data directory of the broker the "
            "bench produces to (--data-dir)?"
        )
    batches = segment_batches(directory)
    return sum(b.size for b in batches), sum(b.records for b in batches), len(batches)


def measure(
    plan_: Plan, addresses: dict[str, str], data_dir: Path, fills: Sequence[int]
) -> CorpusSavings:
    """Every fill of one corpus, each path in turn (see module)."""
    corpus = plan_.corpus
    out = CorpusSavings(corpus.name, corpus.shape, round(corpus.mean_bytes, 1), len(plan_.sample))
    for fill in fills:
        wanted = max(BATCHES, -(-MIN_RECORDS // fill))
        batches = min(wanted, len(plan_.future) // fill)
        if not batches:
            out.skipped_fills.append(fill)
            continue
        values = plan_.future[: fill * batches]
        entry = Fill(fill, len(values))
        for path in PATHS:
            topic = plan_.topics[path]
            before = _stored(data_dir, topic)
            produce(addresses[path], topic, [(v, ()) for v in values], 1, "zstd", fill)
            after = _stored(data_dir, topic)
            if after[1] - before[1] != len(values):
                raise InputError(
                    f"bench savings: {topic} got {after[1] - before[1]} records of {len(values)}"
                )
            entry.stored_bytes[path] = after[0] - before[0]
            entry.batches[path] = after[2] - before[2]
        if fill >= LEVEL_MIN_FILL:
            entry.levels = level_rows(values, fill)
        out.fills.append(entry)
    return out


def level_rows(values: Sequence[bytes], fill: int) -> dict[str, dict[str, float]]:
    """Per level of `LEVELS`: `values` in batches of `fill`, the bytes they store, the CPU ns
    per record librdkafka's zstd takes at that level, and the CPU ns per record of a proxy
    recompressing a client's level-3 batch at that level (decompress, compress; measured)."""
    whole = len(values) - len(values) % fill
    sections = [
        records_section([(v, ()) for v in values[i : i + fill]]) for i in range(0, whole, fill)
    ]
    clients = [producer_zstd()(s) for s in sections]
    return {
        str(f.level): {
            "stored_bytes": f.stored_bytes,
            "cpu_ns_per_record": round(f.cpu_ns),
            "cost_ns_per_record": round(f.cost_ns),
            "recompress_ns_per_record": round(_recompress_ns(clients, f.level) / max(1, whole)),
        }
        for f in level_figures(values, LEVELS, (fill,), timing_runs=TIMING_RUNS)
    }


def _recompress_ns(batches: Sequence[bytes], level: int) -> float:
    """CPU ns to decompress `batches` (zstd frames) and compress them again at `level`, as the
    proxy would rewrite a client's batch: the fastest of `TIMING_RUNS` after a warm-up."""
    compress, decompressor = producer_zstd(level), zstandard.ZstdDecompressor()
    best = float("inf")
    for run in range(TIMING_RUNS + 1):
        started = time.thread_time_ns()
        for batch in batches:
            compress(decompressor.decompressobj().decompress(batch))
        if run:
            best = min(best, time.thread_time_ns() - started)
    return best


def _copy_dictionary(store: DictionaryStore, source: str, target: str) -> None:
    """The active dictionary of namespace `source`, stored and active under `target` too (none
    when training promoted none: both compress without one)."""
    active = store.active(source)
    if active is None:
        return
    store.activate(target, store.add_copy(active, target).id)


def _relay_child(bootstrap: str, store: Path, inputs: Sequence[str], fill: int, log: Path) -> Any:
    """`zdict-sidecar run` on `inputs` (outputs `<input>.zd`), its producer batching `fill`
    records, as a child process."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZDICT_")}
    env.update(
        {
            "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
            "ZDICT_LOG_FORMAT": "json",
            "ZDICT_CODEC__OUTPUT_MODE": "auto",
            "ZDICT_REGISTRY__ENABLED": "false",
            "ZDICT_METRICS__ENABLED": "false",
            "ZDICT_RELAY__INPUT_COMPRESSION": "zstd",
            "ZDICT_PRODUCER__COMPRESSION_TYPE": "zstd",
            "ZDICT_PRODUCER__BATCH_NUM_MESSAGES": str(fill),
            "ZDICT_PRODUCER__LINGER_MS": str(LINGER_MS),
            "ZDICT_PRODUCER__STATISTICS_INTERVAL_MS": RELAY_STATISTICS_MS,
        }
    )
    args = [arg for topic in inputs for arg in ("--input-topic", topic)]
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "sidecar", "run", *args, "--create-topics", "--no-training",
             "--group-id", f"bench-savings-{uuid.uuid4().hex[:8]}",
             "--dictionaries", str(store)],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
        )  # fmt: skip


def measure_relay(
    bootstrap: str,
    data_dir: Path,
    plans: Sequence[Plan],
    results: Sequence[CorpusSavings],
    store: Path,
    tmp: Path,
    admin: Any,
) -> list[str]:
    """Each fill of every corpus through a relay (`RELAY`): the fill's values produced first
    to an input topic of their own (its dictionary the corpus's), then relayed by a relay whose
    producer batches that fill; the output's bytes into `results`. The topics made, to
    delete."""
    made: list[str] = []
    dictionaries = DictionaryStore(store)
    fills = sorted({f.fill for r in results for f in r.fills})
    for fill in fills:
        inputs: dict[str, tuple[Fill, list[bytes]]] = {}
        for p, result in zip(plans, results, strict=True):
            entry = next((f for f in result.fills if f.fill == fill), None)
            if entry is not None:
                topic = f"{p.topics['proxy']}-relay{fill}"
                inputs[topic] = (entry, p.future[: entry.records])
                _copy_dictionary(dictionaries, p.topics["proxy"], topic)
        futures = admin.create_topics([NewTopic(t, num_partitions=1) for t in inputs])
        for future in futures.values():
            future.result(30)
        made += [t for topic in inputs for t in (topic, f"{topic}.zd")]
        for topic, (_, values) in inputs.items():
            produce(bootstrap, topic, [(v, ()) for v in values], 1, "zstd", fill)
        child = _relay_child(bootstrap, store, list(inputs), fill, tmp / f"relay{fill}.log")
        try:
            deadline = time.monotonic() + RELAY_TIMEOUT
            for topic, (entry, values) in inputs.items():
                while True:
                    output = data_dir / f"{topic}.zd-0"
                    stored = _stored(data_dir, f"{topic}.zd") if output.is_dir() else (0, 0, 0)
                    if stored[1] >= len(values):
                        break
                    if child.poll() is not None or time.monotonic() > deadline:
                        raise InputError(
                            f"bench savings: the relay wrote {stored[1]} of {len(values)} "
                            f"records to {topic}.zd; see {tmp / f'relay{fill}.log'}"
                        )
                    time.sleep(0.2)
                entry.stored_bytes[RELAY], _, entry.batches[RELAY] = stored
        finally:
            child.terminate()
            child.wait(60)
    return made


def _delivered(producer: ZdictProducer, topic: str, values: Sequence[bytes]) -> None:
    """`values` produced to `topic`'s one partition, every one delivered; one timestamp, as
    the other paths' (their timestamp deltas take no bytes)."""
    failures: list[str] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    for value in values:
        producer.produce(topic, value, partition=0, on_delivery=delivered, timestamp=TIMESTAMP_MS)
        producer.poll(0)
    left = producer.flush(PRODUCER_TIMEOUT)
    if left or failures:
        raise InputError(
            f"bench savings: {left} records undelivered to {topic}, failures: {failures[:3]}"
        )


def measure_producer(
    bootstrap: str,
    data_dir: Path,
    plans: Sequence[Plan],
    results: Sequence[CorpusSavings],
    store: Path,
    admin: Any,
) -> list[str]:
    """Each fill of every corpus through the in-process producer (`PRODUCER`, see module):
    the fill's values' bytes into `results`. The topics made, to delete."""
    dictionaries = DictionaryStore(store)
    made = [f"{p.topics['proxy']}-{PRODUCER}" for p in plans]
    for future in admin.create_topics([NewTopic(t, num_partitions=1) for t in made]).values():
        future.result(30)
    for p, result, topic in zip(plans, results, made, strict=True):
        encoder = Encoder.from_store(dictionaries, p.topics["proxy"])
        for entry in result.fills:
            others = p.future[entry.records :] + p.future[: entry.records]
            warm_up = others[: max(WARM_UP, 4 * entry.fill)]
            producer = ZdictProducer(
                {
                    "bootstrap.servers": bootstrap,
                    "compression.type": "zstd",
                    "batch.num.messages": entry.fill,
                    "linger.ms": LINGER_MS,
                    "queue.buffering.max.messages": 100_000,
                    "statistics.interval.ms": PRODUCER_STATISTICS_MS,
                },
                encoder=encoder,
            )
            _delivered(producer, topic, warm_up)
            producer.poll(5 * PRODUCER_STATISTICS_MS / 1000)  # windows with its batches
            before = _stored(data_dir, topic)
            _delivered(producer, topic, p.future[: entry.records])
            after = _stored(data_dir, topic)
            if after[1] - before[1] != entry.records:
                raise InputError(
                    f"bench savings: {topic} got {after[1] - before[1]} records of {entry.records}"
                )
            entry.stored_bytes[PRODUCER] = after[0] - before[0]
            entry.batches[PRODUCER] = after[2] - before[2]
    return made


@contextlib.contextmanager
def _proxies(
    bootstrap: str, store: Path, plans: Sequence[Plan], tmp: Path, node_ids: Sequence[int]
) -> Iterator[dict[str, str]]:
    """The frames proxy and the product's, each serving its path's topics; their addresses."""
    started: list[ProxyChild] = []
    try:
        for path, mode in (("frames", "frames"), ("proxy", "auto")):
            topics = [p.topics[path] for p in plans]
            child = ProxyChild(
                bootstrap, store, topics, tmp / f"{path}.log", output_mode=mode, node_ids=node_ids
            )
            started.append(child)
        for child in started:
            child.wait_for('"proxy_listening"', 60)
        yield {"direct": bootstrap, "frames": started[0].address, "proxy": started[1].address}
    finally:
        for child in started:
            child.stop()


def bench_savings(
    bootstrap: str,
    data_dir: Path,
    corpora: Sequence[Corpus],
    *,
    fills: Sequence[int] = FILLS,
    log: Callable[[str], None] = print,
) -> list[CorpusSavings]:
    """Run the benchmark (see module) on `corpora`; `data_dir` is the broker's log directory."""
    if not data_dir.is_dir():
        raise InputError(f"broker data directory {data_dir} does not exist (--data-dir)")
    run_id = uuid.uuid4().hex[:6]
    plans = [plan(c, run_id) for c in corpora]
    admin = plain_admin(bootstrap)
    node_ids = sorted(admin.list_topics(timeout=30).brokers)
    topics = [t for p in plans for t in p.topics.values()]
    # On the broker itself: the proxy refuses admin requests.
    for future in admin.create_topics([NewTopic(t, num_partitions=1) for t in topics]).values():
        future.result(30)
    try:
        with tempfile.TemporaryDirectory(prefix="bench-savings-") as tmp_name:
            tmp = Path(tmp_name)
            store = tmp / "dictionaries"
            for p in plans:
                log(f"{p.corpus.name}: dictionaries trained on its first {len(p.sample):,} values")
                sample = tmp / f"{p.corpus.name}.txt"
                sample.write_bytes(b"\n".join(p.sample) + b"\n")
                for path in ("frames", "proxy"):
                    train(store, sample, p.topics[path])
            with _proxies(bootstrap, store, plans, tmp, node_ids) as addresses:
                results = []
                for p in plans:
                    log(f"{p.corpus.name}: fills {', '.join(map(str, fills))}, three ways")
                    result = measure(p, addresses, data_dir, fills)
                    active = DictionaryStore(store).active(p.topics["proxy"])
                    result.batch_level = active.meta.batch_level if active else None
                    results.append(result)
            log(f"through a relay: fills {', '.join(map(str, fills))}, every corpus at once")
            topics += measure_relay(bootstrap, data_dir, plans, results, store, tmp, admin)
            log(f"through the in-process producer: fills {', '.join(map(str, fills))}")
            topics += measure_producer(bootstrap, data_dir, plans, results, store, admin)
            return results
    finally:
        for future in admin.delete_topics(topics, operation_timeout=30).values():
            with contextlib.suppress(Exception):  # best effort: the bench's own topics
                future.result(60)
