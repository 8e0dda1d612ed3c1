"""`zdict-sidecar verify`: did every input record reach the output, once, intact?

Reads the input topic and the output topic up to their ends (as of the start, output with
`isolation.level=read_committed`: what a transactional consumer sees), decodes every output
record and matches records by content: a record is its key and (decoded) value. Counted like
Jepsen's Kafka checkers:

* **lost**: input records with no output copy;
* **duplicated**: output copies beyond the first of an input record;
* **corrupted**: output records that do not decode (unknown dictionary, bad frame, too large);
* **unseen**: output records that decode to something no input record holds.

Records are matched per partition when input and output have as many partitions (the relay keeps
a record's partition then), else over the whole topic. Identical input records count as many
times as they occur. Memory: about 100 bytes per distinct record (an 8-byte digest and a count).
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, Final, cast

from confluent_kafka import KafkaException, Message, TopicPartition

from sidecar.codec import Decoder
from sidecar.errors import CodecError, InputError, KafkaUnavailable
from sidecar.kafka import is_partition_eof, make_admin, make_reader, partition_counts

#: Seconds without a new record after which a partition counts as read to its end.
IDLE_END: Final = 5.0
#: Corrupted or unseen records described in the report (the counts are always complete).
EXAMPLES: Final = 5


@dataclass(slots=True)
class Verification:
    """What `verify` found; `ok` when nothing was lost, corrupted or unseen (and, with
    `exactly_once`, nothing duplicated)."""

    input_topic: str
    output_topic: str
    inputs: int = 0
    outputs: int = 0
    lost: int = 0
    duplicated: int = 0
    corrupted: int = 0
    unseen: int = 0
    exactly_once: bool = False
    per_partition: bool = True
    seconds: float = 0.0
    examples: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        clean = self.lost == 0 and self.corrupted == 0 and self.unseen == 0
        return clean and (self.duplicated == 0 or not self.exactly_once)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"ok": self.ok}


def _digest(partition: int, key: bytes | None, value: bytes | None) -> bytes:
    h = hashlib.blake2b(digest_size=8)
    h.update(partition.to_bytes(4, "big", signed=True))
    for part in (key, value):
        if part is None:
            h.update(b"\xff")
        else:
            h.update(len(part).to_bytes(4, "big"))
            h.update(part)
    return h.digest()


def _read(settings: Any, topic: str, partitions: int) -> Iterator[Message]:
    """Every committed record of `topic` up to the end offsets it had when reading began."""
    reader = make_reader(settings, "verify", {"isolation.level": "read_committed"})
    try:
        ends: dict[int, int] = {}
        for p in range(partitions):
            try:
                _, high = reader.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            except KafkaException as exc:
                raise KafkaUnavailable(f"cannot read offsets of {topic}[{p}]: {exc}") from None
            if high > 0:
                ends[p] = high
        reader.assign([TopicPartition(topic, p, 0) for p in ends])
        done: set[int] = set()
        last = time.monotonic()
        while len(done) < len(ends):
            messages = reader.consume(1000, 0.2)
            if not messages:
                if time.monotonic() - last > IDLE_END:
                    break  # the rest are transaction markers or aborted records
                continue
            last = time.monotonic()
            for msg in messages:
                err = msg.error()
                if err is not None:
                    if is_partition_eof(err):
                        continue
                    raise KafkaUnavailable(f"reading {topic}: {err.str()}")
                partition, offset = msg.partition(), msg.offset()
                assert partition is not None and offset is not None
                if offset >= ends[partition]:
                    done.add(partition)
                    continue
                yield msg
                if offset + 1 >= ends[partition]:
                    done.add(partition)
    finally:
        reader.close()


def verify(
    settings: Any,
    decoder: Decoder,
    input_topic: str,
    output_topic: str,
    *,
    exactly_once: bool = False,
) -> Verification:
    """Match `output_topic` against `input_topic` (see the module)."""
    started = time.monotonic()
    bootstrap = settings.kafka.client_config()["bootstrap.servers"]
    counts = partition_counts(make_admin(settings), [input_topic, output_topic], 30.0, bootstrap)
    for topic in (input_topic, output_topic):
        if topic not in counts:
            raise InputError(f"topic {topic} does not exist (bootstrap.servers={bootstrap})")
    report = Verification(input_topic, output_topic, exactly_once=exactly_once)
    report.per_partition = counts[input_topic] == counts[output_topic]
    expected: Counter[bytes] = Counter()
    for msg in _read(settings, input_topic, counts[input_topic]):
        partition = cast(int, msg.partition()) if report.per_partition else -1
        expected[_digest(partition, msg.key(), msg.value())] += 1
        report.inputs += 1
    seen: Counter[bytes] = Counter()
    for msg in _read(settings, output_topic, counts[output_topic]):
        report.outputs += 1
        partition = cast(int, msg.partition()) if report.per_partition else -1
        headers = cast(list[tuple[str, bytes | None]], msg.headers() or [])
        try:
            value = decoder.decode(msg.value(), headers)
        except CodecError as exc:
            report.corrupted += 1
            if len(report.examples) < EXAMPLES:
                where = f"{output_topic}[{msg.partition()}]@{msg.offset()}"
                report.examples.append(f"corrupted {where}: {exc}")
            continue
        digest = _digest(partition, msg.key(), value)
        if digest not in expected:
            report.unseen += 1
            if len(report.examples) < EXAMPLES:
                report.examples.append(f"unseen {output_topic}[{msg.partition()}]@{msg.offset()}")
            continue
        seen[digest] += 1
    for digest, count in expected.items():
        got = seen.get(digest, 0)
        report.lost += max(0, count - got)
        report.duplicated += max(0, got - count)
    report.seconds = time.monotonic() - started
    return report
