"""The relay's output: transformed records produced in order, each acknowledged for its input.

Per consumed batch of an input topic (`TopicRoute`):

- to the same partition number when input and output have as many partitions: one delivery
  report per input partition, on its last record, stands for the records before it (an
  idempotent producer with `enable.gapless.guarantee` keeps them in order and cannot lose one
  alone, see `offsets`);
- else by key: each record carries its own report;
- a record that cannot be transformed, or that the output topic would refuse, goes to the
  dead-letter topic (its own report), or the relay stops before it;
- a full producer queue is drained (`poll`) and the record retried, never dropped.

A report marks its records acknowledged (`OffsetTracker`), unless it failed or came so late that
a record of it could have timed out unseen: then `delivery_failed` decides (stop, or abort the
transaction).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, cast

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from sidecar.codec import Transformed
from sidecar.errors import CodecError, RecordTooLarge
from sidecar.kafka import LIBRDKAFKA_MESSAGE_TIMEOUT_MS
from sidecar.logs import get_logger
from sidecar.metrics import NamespaceMetrics
from sidecar.namespaces import Namespace, Records
from sidecar.relay.dead_letters import error_headers, record_size
from sidecar.relay.offsets import Unit
from sidecar.relay.state import RelayState

log = get_logger("sidecar.relay.output")

#: `partition` for librdkafka's partitioner to choose (RD_KAFKA_PARTITION_UA).
PARTITION_ANY: Final = -1
#: At most one record in this many feeds the latency histogram (an observation costs ~1 µs);
#: a delivery report standing for more records feeds it once.
LATENCY_SAMPLE_EVERY: Final = 8
#: What a record may weigh without a limit known (librdkafka's message.max.bytes default).
DEFAULT_MAX_RECORD_BYTES: Final = 1_000_000
#: Records whose encoded value is this far below the limit are not measured exactly (bytes left
#: for the key and the headers).
HEADROOM: Final = 65_536
#: Seconds between two `record_set_aside` log lines of one namespace (counts are in metrics).
DEAD_LETTER_LOG_INTERVAL: Final = 10.0
#: Seconds a produced record may wait for its acknowledgement before the producer fails it
#: (librdkafka's default message.timeout.ms; `run` passes the producer's own).
DEFAULT_DELIVERY_TIMEOUT: Final = LIBRDKAFKA_MESSAGE_TIMEOUT_MS / 1000


def counted(
    decode: Callable[[Records], list[Transformed]], metrics: NamespaceMetrics
) -> Callable[[Records], list[Transformed]]:
    """`decode`, each batch counted in `metrics` (outcomes, bytes, the mean time)."""

    def transform(records: Records) -> list[Transformed]:
        started = time.perf_counter()
        decoded = decode(records)
        metrics.observe_batch(decoded, time.perf_counter() - started)
        return decoded

    return transform


@dataclass(slots=True)
class TopicRoute:
    """Per input topic: where its records go and how they are encoded (or decoded)."""

    topic: str
    output: str
    same_partitions: bool
    #: The batch transform, counted in the metrics: the namespace's `encode`, or the decoder's
    #: `decode_batch` in decode mode.
    transform: Callable[[Records], list[Transformed]]
    #: The namespace (encoder, training sample) of an encoding relay; None when decoding.
    namespace: Namespace | None
    metrics: NamespaceMetrics
    #: Where records that cannot be processed go (None: the relay stops at them).
    dead_letter: str | None = None
    #: Bytes the output topic and the producer accept for one record.
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
    dead_letter_logged: float = -1e18


class Output:
    """Produces the relay's transformed batches and dead letters (see the module)."""

    def __init__(
        self,
        producer: Producer,
        state: RelayState,
        delivery_failed: Callable[[str], None],
        delivery_timeout: float = DEFAULT_DELIVERY_TIMEOUT,
    ) -> None:
        """`delivery_failed` is told what was not delivered (the commit strategy's call);
        `delivery_timeout` is the producer's message.timeout.ms in seconds
        (`sidecar.kafka.delivery_timeout`): a report that comes later may stand for a record
        that timed out unseen."""
        self._producer = producer
        self._state = state
        self._delivery_failed = delivery_failed
        self._delivery_timeout = delivery_timeout
        #: Records acknowledged since the last latency observation.
        self._unobserved = 0

    def replace_producer(self, producer: Producer) -> None:
        """Produce with `producer` from now on (the old one flushed: no report of it is due)."""
        self._producer = producer

    def produce(
        self, route: TopicRoute, topic: str, batch: list[Message], encoded: list[Transformed]
    ) -> None:
        """Produce a transformed batch of input `topic`, in order."""
        if route.same_partitions:
            self._produce_batch(route, topic, batch, encoded)
        else:
            self._produce_keyed(route, topic, batch, encoded)

    def _report_for(
        self, route: TopicRoute, topic: str, partition: int, target: str, unit: Unit
    ) -> Callable[[KafkaError | None, Message], None]:
        """The delivery report of `unit`: its records are acknowledged when it arrives without
        an error, and soon enough that none of them could have timed out unseen before it."""

        def delivered(err: KafkaError | None, msg: Message) -> None:
            where = f"{topic}[{partition}]@{unit.first}"
            if unit.last != unit.first:
                where += f"..{unit.last}"
            if err is not None:
                self._state.metrics.produce_error(err.name())
                self._delivery_failed(f"delivery of {where} to {target} failed: {err.str()}")
                return
            waited = self._state.clock() - unit.started
            if waited >= self._delivery_timeout:
                # A record before the reported one may have timed out in the producer (the one
                # failure `enable.gapless.guarantee` lets through) without a report of its own.
                self._delivery_failed(
                    f"delivery of {where} to {target} was acknowledged {waited:.0f} s after it "
                    f"began, past the producer's message.timeout.ms ({self._delivery_timeout:.0f} "
                    "s): a record of it may have timed out unseen"
                )
                return
            self._state.reachability.answered()
            self._state.stats.delivered += unit.count
            self._state.offsets.acked(topic, partition, unit)
            self._unobserved += unit.count
            if self._unobserved >= LATENCY_SAMPLE_EVERY and unit.timestamp > 0:
                self._unobserved = 0
                # The unit's oldest record: the latency is never understated.
                route.metrics.observe_delivery_latency(time.time() - unit.timestamp / 1000.0)

        return delivered

    def _produce_batch(
        self, route: TopicRoute, topic: str, batch: list[Message], encoded: list[Transformed]
    ) -> None:
        """Produce a transformed batch in order, each record to its input's partition number;
        one delivery report per input partition, on its last record (see `offsets`).

        This loop runs once per record at the relay's full rate: everything that is the same
        for the whole batch, or for a partition of it, is done before it.
        """
        n = len(batch)
        parts = cast(list[int], [m.partition() for m in batch])
        backwards = parts[::-1]
        reports: list[Callable[[KafkaError | None, Message], None] | None] = [None] * n
        units: dict[int, Unit] = {}
        started = self._state.clock()
        output, offsets = route.output, self._state.offsets
        for partition in set(parts):
            head = batch[parts.index(partition)]
            end = n - 1 - backwards.index(partition)
            ts_type, ts = head.timestamp()
            unit = offsets.open(
                topic, partition, cast(int, head.offset()), started, ts if ts_type else 0
            )
            unit.count += parts.count(partition)
            unit.last = cast(int, batch[end].offset())
            reports[end] = self._report_for(route, topic, partition, output, unit)
            offsets.reported(topic, partition, unit)
            units[partition] = unit
        fast_limit = route.max_record_bytes - HEADROOM
        # Positional arguments: confluent-kafka parses keywords with PyArg_ParseTupleAndKeywords,
        # which cost ~1.2 µs of the ~2.6 µs of a produce() call (measured, 113-byte records).
        # The order is the C signature's: topic, value, key, partition, callback, on_delivery
        # (an alias of callback), timestamp (0: now), headers. The stubs do not describe it.
        produce = cast(Any, self._producer).produce
        produced = 0
        for msg, enc, report, partition in zip(batch, encoded, reports, parts, strict=True):
            value, headers, _, _, size = enc
            if size <= fast_limit:
                ts_type, ts = msg.timestamp()
                try:
                    produce(
                        output,
                        value,
                        msg.key(),
                        partition,
                        report,
                        None,
                        ts if ts_type and ts >= 0 else 0,
                        headers or None,
                    )
                except BufferError:
                    # Queue full: let deliveries drain it, then the general path retries.
                    self._state.stats.queue_full_waits += 1
                    self._producer.poll(0.1)
                    self._state.health.beat()
                    self._send(route, msg, output, value, headers, units[partition], report)
                except KafkaException:
                    # Refused outright: the general path tries once more, then sets it aside or
                    # stops.
                    self._send(route, msg, output, value, headers, units[partition], report)
                else:
                    produced += 1
                    continue
            else:  # near the limit: measure it exactly
                self._produce_if_it_fits(route, msg, enc, units[partition], report)
            if self._state.control.failure is not None:
                break  # nothing after a refused record is produced before it
        self._state.stats.produced += produced

    def _produce_keyed(
        self, route: TopicRoute, topic: str, batch: list[Message], encoded: list[Transformed]
    ) -> None:
        """Produce a transformed batch in order to an output topic with another partition count,
        partitioned by key: a record's report stands for itself only."""
        fast_limit = route.max_record_bytes - HEADROOM
        produce = cast(Any, self._producer).produce  # positional, as in `_produce_batch`
        output, single = route.output, self._state.offsets.single
        started = self._state.clock()
        produced = 0
        for msg, enc in zip(batch, encoded, strict=True):
            if enc.output_bytes <= fast_limit:
                partition, offset = cast(int, msg.partition()), cast(int, msg.offset())
                ts_type, ts = msg.timestamp()
                unit = single(topic, partition, offset, started, ts if ts_type else 0)
                report = self._report_for(route, topic, partition, output, unit)
                try:
                    produce(
                        output,
                        enc.value,
                        msg.key(),
                        PARTITION_ANY,
                        report,
                        None,
                        ts if ts_type and ts >= 0 else 0,
                        enc.headers or None,
                    )
                except BufferError:
                    self._state.stats.queue_full_waits += 1
                    self._producer.poll(0.1)
                    self._state.health.beat()
                    self._send(route, msg, output, enc.value, enc.headers, unit, report)
                except KafkaException:
                    self._send(route, msg, output, enc.value, enc.headers, unit, report)
                else:
                    produced += 1
                    continue
            else:
                self._produce_if_it_fits(route, msg, enc)
            if self._state.control.failure is not None:
                break
        self._state.stats.produced += produced

    def _produce_if_it_fits(
        self,
        route: TopicRoute,
        msg: Message,
        enc: Transformed,
        unit: Unit | None = None,
        report: Callable[[KafkaError | None, Message], None] | None = None,
    ) -> None:
        """Produce `enc` (as part of `unit`, see `_send`), or set it aside when the output
        topic would refuse it."""
        size = record_size(msg.key(), enc.value, enc.headers)
        if size > route.max_record_bytes:
            too_large = RecordTooLarge(
                f"{size} bytes encoded, above the {route.max_record_bytes} bytes {route.output} "
                "and the producer accept"
            )
            if unit is not None:
                self._leave(msg, unit, report)
            self._set_aside(route, msg, "produce", too_large)
        else:
            self._send(route, msg, route.output, enc.value, enc.headers, unit, report)

    def one_by_one(self, route: TopicRoute, batch: list[Message], records: Records) -> None:
        """The batch failed to transform: do it record by record, setting the bad ones aside.

        Without a dead-letter topic the relay stops at the first bad record: the ones before it
        are still produced (and committed once acknowledged), nothing from it on is, so a restart
        after the cause is fixed resumes exactly there.
        """
        stage = "encode" if route.namespace is not None else "decode"
        for msg, record in zip(batch, records, strict=True):
            if self._state.control.failure is not None:
                break
            try:
                (enc,) = route.transform([record])
            except CodecError as exc:
                self._set_aside(route, msg, stage, exc)
                continue
            self._produce_if_it_fits(route, msg, enc)

    def _set_aside(self, route: TopicRoute, msg: Message, stage: str, error: Exception) -> None:
        """A record that cannot be processed: to the dead-letter topic, or stop before it."""
        topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
        assert topic is not None and partition is not None and offset is not None
        where = f"{topic}[{partition}]@{offset}"
        if route.dead_letter is None:
            self._state.control.fail(
                f"cannot {stage} {where}: {type(error).__name__}: {error}; nothing from it on is "
                "committed (ZDICT_RELAY__DEAD_LETTER_TOPIC sets such records aside instead)"
            )
            return
        headers = [*(msg.headers() or []), *error_headers(topic, partition, offset, stage, error)]
        route.metrics.dead_letter(stage)
        self._state.stats.dead_letters += 1
        now = self._state.clock()
        if now - route.dead_letter_logged >= DEAD_LETTER_LOG_INTERVAL:
            route.dead_letter_logged = now
            log.warning(
                "record_set_aside",
                record=where,
                stage=stage,
                error_class=type(error).__name__,
                error=str(error)[:300],
                dead_letter_topic=route.dead_letter,
                set_aside_so_far=self._state.stats.dead_letters,
            )
        self._send(route, msg, route.dead_letter, msg.value(), headers, dead_letter=True)

    def _leave(
        self,
        msg: Message,
        unit: Unit,
        report: Callable[[KafkaError | None, Message], None] | None,
    ) -> None:
        """`msg` will not be produced as part of `unit` (it is set aside): the unit no longer
        stands for it, and if it was to carry the unit's report, the unit goes on without."""
        unit.count -= 1
        if report is not None:
            self._state.offsets.unreported(cast(str, msg.topic()), cast(int, msg.partition()), unit)

    def _send(
        self,
        route: TopicRoute,
        msg: Message,
        target: str,
        value: bytes | None,
        headers: Any,
        unit: Unit | None = None,
        report: Callable[[KafkaError | None, Message], None] | None = None,
        *,
        dead_letter: bool = False,
    ) -> None:
        """Produce one record for input `msg` to `target`, waiting while the queue is full.

        A dead letter is a unit of its own. A record to the output topic is part of `unit`,
        counted there already (`report`: the unit's report, if this record carries it); without
        `unit`, it gets a report of its own, which stands for its partition's open unit too
        when the output has the input's partitions (same output partition, in order).
        """
        topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
        assert topic is not None and partition is not None and offset is not None
        ts_type, ts = msg.timestamp()
        if unit is None:
            started, stamp = self._state.clock(), ts if ts_type else 0
            if dead_letter or not route.same_partitions:
                unit = self._state.offsets.single(topic, partition, offset, started, stamp)
            else:
                unit = self._state.offsets.open(topic, partition, offset, started, stamp)
                unit.count += 1
                unit.last = offset
                self._state.offsets.reported(topic, partition, unit)
            report = self._report_for(route, topic, partition, target, unit)
        kwargs: dict[str, Any] = {"key": msg.key(), "value": value, "headers": headers or None}
        if report is not None:
            kwargs["on_delivery"] = report
        if ts_type and ts >= 0:
            kwargs["timestamp"] = ts
        if route.same_partitions and not dead_letter:
            kwargs["partition"] = partition
        while True:
            try:
                self._producer.produce(target, **kwargs)
                break
            except KafkaException as exc:  # refused outright, e.g. larger than message.max.bytes
                error: KafkaError = exc.args[0]
                self._state.metrics.produce_error(error.name())
                if not dead_letter and route.dead_letter is not None and not error.retriable():
                    self._leave(msg, unit, report)  # the dead letter replaces it
                    self._set_aside(route, msg, "produce", exc)
                    return
                self._state.control.fail(
                    f"cannot produce {topic}[{partition}]@{offset} to {target}: "
                    f"{error.str()}; nothing past it is committed"
                )
                return
            except BufferError:
                # Queue full: let deliveries drain it. Consuming waits meanwhile (backpressure).
                self._state.stats.queue_full_waits += 1
                self._producer.poll(0.1)
                self._state.health.beat()
        self._state.stats.produced += 1
