"""`zdict-sidecar bench savings`: through the proxy, on every real corpus of this machine, the
bytes the broker stores against the better of per-record frames and the producer's zstd alone.

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
"""

from __future__ import annotations

import contextlib
import tempfile
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

from sidecar.bench.corpora import Corpus
from sidecar.bench.proxy_children import ProxyChild, train
from sidecar.bench.storage import produce
from sidecar.errors import InputError
from sidecar.kafka import plain_admin
from sidecar.record_batch import segment_batches

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
#: What the broker stores: producer zstd alone, frames always, the product (output mode auto).
PATHS: Final = ("direct", "frames", "proxy")


@dataclass(slots=True)
class Fill:
    """One fill of one corpus: records and bytes the broker stored per path."""

    fill: int
    records: int
    stored_bytes: dict[str, int] = field(default_factory=dict)
    batches: dict[str, int] = field(default_factory=dict)

    @property
    def versus_better(self) -> float:
        """The product's bytes over the fewer of frames' and producer zstd's."""
        return self.stored_bytes["proxy"] / min(
            self.stored_bytes["direct"], self.stored_bytes["frames"]
        )

    @property
    def versus_producer(self) -> float:
        """The product's bytes over producer zstd's alone (below 1: saved)."""
        return self.stored_bytes["proxy"] / self.stored_bytes["direct"]


@dataclass(slots=True)
class CorpusSavings:
    """One corpus: its shape, the sample trained on, and each fill measured."""

    corpus: str
    shape: str
    mean_bytes: float
    sample: int
    fills: list[Fill] = field(default_factory=list)
    skipped_fills: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {
            "fills": [
                asdict(f)
                | {
                    "versus_better": round(f.versus_better, 4),
                    "versus_producer": round(f.versus_producer, 4),
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
        out.fills.append(entry)
    return out


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
                    results.append(measure(p, addresses, data_dir, fills))
                return results
    finally:
        for future in admin.delete_topics(topics, operation_timeout=30).values():
            with contextlib.suppress(Exception):  # best effort: the bench's own topics
                future.result(60)
