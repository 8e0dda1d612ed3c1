"""Produce requests: batches decoded, each value encoded on its own, every record forwarded to
the same partition upstream, the client answered per its `acks` once upstream acknowledged.

Per partition of a request, in order:

1. the upstream topic (`proxy.upstream_topic`) must exist and hold the partition, else
   UNKNOWN_TOPIC_OR_PARTITION (LEADER_NOT_AVAILABLE while the cluster does not answer);
2. its record batches are decoded (`record_batch.decode_batches`: CRC-32C checked, gzip, lz4 and
   zstd decompressed; snappy refused with UNSUPPORTED_COMPRESSION_TYPE);
3. an idempotent producer's batch is checked against its sequence numbers (`sequences`): a
   batch sent again is answered as its first copy was, never written twice;
4. the values are encoded with the namespace's encoder (the relay's skip rules), every record
   checked against what the upstream producer accepts, then all of them produced (key,
   headers, timestamp, partition kept) by the proxy's idempotent, acks=all producer, in order;
5. once upstream has acknowledged every record of the request, or failed one, the client gets
   the offset of each partition's first record, or the error mapped to the Kafka code it
   retries (timeouts, network) or reports. A request still waiting when its timeout is nearly
   over is answered REQUEST_TIMED_OUT (its records may still be written: a client that is not
   idempotent may then write them twice, as with a broker that timed out). acks=0 gets no
   answer, as from a broker.

Nothing is acknowledged that upstream did not acknowledge. Batches are produced in the order
their requests arrived on a connection, and librdkafka keeps that order per partition.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol, TypeVar, cast

from confluent_kafka import KafkaError, KafkaException, Message, Producer
from kio.schema.errors import ErrorCode

from sidecar.codec import Transformed
from sidecar.errors import CodecError, MalformedBatch
from sidecar.kafka import protocol_error_code
from sidecar.logs import get_logger
from sidecar.metrics import Metrics
from sidecar.proxy.forward.routes import Route
from sidecar.proxy.metadata import UpstreamTopics
from sidecar.proxy.protocol import NO_THROTTLE, PRODUCE, Request, build, nested, response_class
from sidecar.proxy.sequences import Sequences, Verdict
from sidecar.record_batch import DecodedBatch, DecodedRecord, decode_batches
from sidecar.relay.dead_letters import record_size

log = get_logger(__name__)

#: Seconds to wait before producing again into a full producer queue (backpressure: the
#: connection's next request is not read meanwhile).
QUEUE_FULL_WAIT: Final = 0.005
#: The answer leaves this share of the client's request timeout, and at most a second, for the
#: way back: a client that timed out first would send the batch again.
ANSWER_MARGIN: Final = 0.1
MAX_ANSWER_MARGIN: Final = 1.0
#: Seconds between two log lines about the same kind of refused batch.
REFUSAL_LOG_INTERVAL: Final = 10.0
_MALFORMED_CODES: Final = {
    "corrupt": ErrorCode.corrupt_message,
    "codec": ErrorCode.unsupported_compression_type,
    "format": ErrorCode.invalid_record,
}


class Routes(Protocol):
    """The namespaces the proxy serves (`service.Namespaces`)."""

    def upstream_for(self, topic: str) -> str:
        """The upstream topic of `topic` (without setting anything up)."""
        ...

    def route(self, topic: str) -> Route:
        """The route of `topic`, set up on first use."""
        ...


@dataclass(frozen=True, slots=True)
class Written:
    """A partition's (or a batch's) answer: its first record's upstream offset, or an error."""

    error: int = ErrorCode.none
    base_offset: int = -1
    message: str | None = None
    #: Every record's upstream offset, in order (a batch's answer; empty otherwise).
    offsets: tuple[int, ...] = ()

    @property
    def ok(self) -> bool:
        return self.error == ErrorCode.none


T = TypeVar("T")
#: Per partition of a request, in order: (topic, partition, its batches' answers).
Forwarded = list[tuple[str, int, list["asyncio.Future[Written]"]]]


def _done(value: T) -> asyncio.Future[T]:
    future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
    future.set_result(value)
    return future


class _Delivery:
    """Collects the upstream acknowledgements of one batch's records (librdkafka calls it, in
    order within the partition, from `producer.poll` on the event loop) and resolves its future
    with the last one."""

    __slots__ = ("error", "future", "offsets", "remaining")

    def __init__(self, loop: asyncio.AbstractEventLoop, records: int) -> None:
        self.future: asyncio.Future[Written] = loop.create_future()
        self.remaining = records
        self.offsets: list[int] = []
        self.error: KafkaError | None = None

    def __call__(self, error: KafkaError | None, msg: Message | None) -> None:
        if error is None and msg is not None:
            self.offsets.append(cast(int, msg.offset()))
        self.settle(1, error)

    def settle(self, records: int, error: KafkaError | None) -> None:
        """`records` of the batch are done (written, or failed with `error`)."""
        if error is not None and self.error is None:
            self.error = error
        self.remaining -= records
        if self.remaining or self.future.done() or self.future.get_loop().is_closed():
            return  # (closed: the last flush at exit; nobody waits for the answer any more)
        if self.error is not None:
            self.future.set_result(
                Written(
                    protocol_error_code(self.error),
                    message=f"upstream did not take the batch: {self.error.str()}",
                )
            )
        else:
            offsets = tuple(self.offsets)
            self.future.set_result(
                Written(base_offset=offsets[0] if offsets else -1, offsets=offsets)
            )


class _Sampled:
    """A written record as the training reservoir reads it (`sampling.SampledRecord`)."""

    __slots__ = ("_offset", "_partition", "_value")

    def __init__(self, partition: int, offset: int, value: bytes | None) -> None:
        self._partition, self._offset, self._value = partition, offset, value

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes | None:
        return self._value


class ProduceHandler:
    """Serves Produce requests (see module)."""

    def __init__(
        self,
        *,
        producer: Producer,
        routes: Routes,
        topics: UpstreamTopics,
        metrics: Metrics,
        sequences: Sequences[asyncio.Future[Written]],
        max_batch_bytes: int,
        max_record_bytes: int,
        produced: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Args:
        max_batch_bytes: what one batch may decompress to.
        max_record_bytes: what one record may weigh once encoded (the upstream producer's
            message.max.bytes).
        produced: called once records were handed to the producer (whoever serves its
            delivery reports looks sooner).
        """
        self.producer = producer
        self.routes = routes
        self.topics = topics
        self.metrics = metrics
        self.sequences = sequences
        self.max_batch_bytes = max_batch_bytes
        self.max_record_bytes = max_record_bytes
        self.clock = clock
        self._produced = produced
        self._logged: dict[str, float] = {}
        self.batches = 0
        self.records = 0

    async def forward(self, request: Request) -> Forwarded:
        """Hand every record of `request` to the upstream producer, in order; what to wait for.

        The caller awaits this before it reads the connection's next request: that keeps each
        partition's records in the order their requests came."""
        body = request.body
        forwarded: Forwarded = []
        refusal = self._refusal(body.acks, body.transactional_id, request.client_id)
        for topic_data in body.topic_data:
            for partition in topic_data.partition_data:
                if refusal is not None:
                    futures = [_done(refusal)]
                else:
                    futures = await self._partition(
                        topic_data.name, partition.index, partition.records, request.client_id
                    )
                forwarded.append((topic_data.name, partition.index, futures))
        return forwarded

    async def answer(self, request: Request, forwarded: Forwarded) -> Any:
        """The ProduceResponse, once upstream answered for every batch or the request's
        timeout (less a margin for the way back) is over."""
        timeout = request.body.timeout.total_seconds()
        deadline = max(0.0, timeout - min(MAX_ANSWER_MARGIN, timeout * ANSWER_MARGIN))
        pending = [f for _, _, futures in forwarded for f in futures if not f.done()]
        if pending:
            await asyncio.wait(pending, timeout=deadline)
            if not all(f.done() for f in pending):
                self._log_refusal(
                    "timeout",
                    request.client_id,
                    f"upstream acknowledged nothing within {deadline:.1f} s: answered "
                    "REQUEST_TIMED_OUT (the client retries)",
                )
        return self._response(request.version, forwarded)

    def _refusal(
        self, acks: int, transactional_id: str | None, client: str | None
    ) -> Written | None:
        if acks not in (0, 1, -1):
            return Written(ErrorCode.invalid_required_acks, message=f"acks={acks}: use 0, 1 or -1")
        if transactional_id is not None:
            self._log_refusal(
                "transactions",
                client,
                "transactions are not supported by the proxy: produce transactionally to the "
                "cluster directly",
            )
            return Written(
                ErrorCode.invalid_request,
                message="the zdict-sidecar proxy does not support transactions",
            )
        return None

    def _log_refusal(self, kind: str, client: str | None, error: str) -> None:
        now = self.clock()
        if now - self._logged.get(kind, -1e18) >= REFUSAL_LOG_INTERVAL:
            self._logged[kind] = now
            log.warning("produce_refused", kind=kind, client_id=client, error=error)

    async def _partition(
        self, topic: str, index: int, records: bytes | None, client: str | None
    ) -> list[asyncio.Future[Written]]:
        """Forward one partition's batches; the futures of their answers, in order."""
        upstream = self.routes.upstream_for(topic)
        count = self.topics.partitions(upstream)
        if count is None:
            await self.topics.refresh([upstream])
            count = self.topics.partitions(upstream)
        if count is None or not 0 <= index < count:
            reachable = self.topics.reachable
            what = (
                f"upstream topic {upstream} has no partition {index}"
                if count is not None
                else f"upstream topic {upstream} does not exist"
                if reachable
                else "the upstream cluster does not answer"
            )
            code = (
                ErrorCode.unknown_topic_or_partition
                if reachable
                else ErrorCode.leader_not_available
            )
            self._log_refusal(f"topic:{upstream}", client, what)
            return [_done(Written(code, message=what))]
        # Set up (encoder, sample, trainer) only for topics that exist upstream: a client
        # producing to made-up names must not make namespaces of them.
        route = self.routes.route(topic)
        try:
            batches = decode_batches(records or b"", self.max_batch_bytes)
        except MalformedBatch as exc:
            self._log_refusal(f"batch:{exc.reason}", client, str(exc))
            return [_done(Written(_MALFORMED_CODES[exc.reason], message=str(exc)))]
        return [await self._batch(route, index, batch, client) for batch in batches]

    async def _batch(
        self, route: Route, partition: int, batch: DecodedBatch, client: str | None
    ) -> asyncio.Future[Written]:
        if batch.transactional or batch.control:
            self._log_refusal("transactions", client, "a transactional batch")
            return _done(
                Written(
                    ErrorCode.invalid_request,
                    message="the zdict-sidecar proxy does not support transactions",
                )
            )
        idempotent = batch.producer_id >= 0 and batch.base_sequence >= 0
        if idempotent:
            check = self.sequences.check(
                batch.producer_id,
                batch.producer_epoch,
                route.topic,
                partition,
                batch.base_sequence,
                batch.last_sequence,
            )
            if check.verdict is Verdict.IN_FLIGHT:
                assert check.waiter is not None
                return check.waiter
            if check.verdict is not Verdict.NEW:
                return _done(_sequence_answer(check.verdict, check.base_offset, check.expected))
        prepared = self._encode(route, batch)
        if isinstance(prepared, Written):
            self._log_refusal(f"record:{prepared.error}", client, prepared.message or "")
            return _done(prepared)
        delivery = _Delivery(asyncio.get_running_loop(), len(batch.records))
        if idempotent:
            self.sequences.started(
                batch.producer_id,
                batch.producer_epoch,
                route.topic,
                partition,
                batch.base_sequence,
                batch.last_sequence,
                delivery.future,
            )
        delivery.future.add_done_callback(
            lambda future: self._finished(route, partition, batch, idempotent, future.result())
        )
        await self._produce(route, partition, batch.records, prepared, delivery)
        self._produced()
        self.batches += 1
        self.records += len(batch.records)
        return delivery.future

    def _encode(self, route: Route, batch: DecodedBatch) -> list[Transformed] | Written:
        """The batch's values encoded, or the refusal of the whole batch (nothing is written of
        a batch that is refused)."""
        try:
            inputs = [
                (r.value, [(k.decode(), v) for k, v in r.headers] if r.headers else None)
                for r in batch.records
            ]
        except UnicodeDecodeError:
            return Written(ErrorCode.invalid_record, message="a record header key is not UTF-8")
        try:
            encoded = route.namespace.encode(inputs)
        except CodecError as exc:
            return Written(ErrorCode.invalid_record, message=f"a record cannot be encoded: {exc}")
        limit = self.max_record_bytes
        for record, enc in zip(batch.records, encoded, strict=True):
            if enc.output_bytes + len(record.key or b"") + 64 > limit:
                size = record_size(record.key, enc.value, enc.headers)
                if size > limit:
                    return Written(
                        ErrorCode.message_too_large,
                        message=f"a record of {size} bytes once encoded is above the "
                        f"{limit} bytes the upstream producer accepts (message.max.bytes)",
                    )
        return encoded

    async def _produce(
        self,
        route: Route,
        partition: int,
        records: Sequence[DecodedRecord],
        encoded: Sequence[Transformed],
        delivery: _Delivery,
    ) -> None:
        # Positional arguments, as in the relay: topic, value, key, partition, callback,
        # on_delivery (an alias), timestamp (0: now), headers.
        produce = cast(Any, self.producer).produce
        upstream = route.upstream
        for i, (record, enc) in enumerate(zip(records, encoded, strict=True)):
            timestamp = max(0, record.timestamp)
            while True:
                try:
                    produce(
                        upstream,
                        enc.value,
                        record.key,
                        partition,
                        delivery,
                        None,
                        timestamp,
                        enc.headers or None,
                    )
                    break
                except BufferError:
                    await asyncio.sleep(QUEUE_FULL_WAIT)
                except KafkaException as exc:
                    # Refused outright (librdkafka's own checks): this and the rest fail.
                    delivery.settle(len(records) - i, exc.args[0])
                    return

    def _finished(
        self, route: Route, partition: int, batch: DecodedBatch, idempotent: bool, written: Written
    ) -> None:
        """Bookkeeping once upstream answered for a batch: sequences, sample, latency."""
        if idempotent:
            self.sequences.finished(
                batch.producer_id,
                batch.producer_epoch,
                route.topic,
                partition,
                batch.base_sequence,
                written.base_offset if written.ok else None,
            )
        if not written.ok:
            self.metrics.produce_error(ErrorCode(written.error).name.upper())
            return
        first = batch.records[0]
        namespace = route.namespace
        if first.timestamp > 0:
            namespace.metrics.observe_delivery_latency(time.time() - first.timestamp / 1000.0)
        if namespace.reservoir is not None and len(written.offsets) == len(batch.records):
            namespace.reservoir.offer(
                [
                    _Sampled(partition, offset, record.value)
                    for offset, record in zip(written.offsets, batch.records, strict=True)
                ]
            )

    def _response(self, version: int, forwarded: Forwarded) -> Any:
        cls = response_class(PRODUCE, version)
        topic_class = nested(cls, "TopicProduceResponse")
        partition_class = nested(cls, "PartitionProduceResponse")
        by_topic: dict[str, list[Any]] = {}
        for topic, index, futures in forwarded:
            written = _combine(futures)
            by_topic.setdefault(topic, []).append(
                build(
                    partition_class,
                    index=index,
                    error_code=ErrorCode(written.error),
                    base_offset=written.base_offset,
                    log_append_time=None,
                    log_start_offset=-1,
                    record_errors=(),
                    error_message=written.message,
                )
            )
        return build(
            cls,
            responses=tuple(
                topic_class(name=name, partition_responses=tuple(parts))
                for name, parts in by_topic.items()
            ),
            throttle_time=NO_THROTTLE,
        )


def _combine(futures: list[asyncio.Future[Written]]) -> Written:
    """One partition's answer from its batches': the first error, else the first offset."""
    if not futures:
        return Written()
    base = -1
    for future in futures:
        if not future.done():
            return Written(
                ErrorCode.request_timed_out,
                message="upstream has not acknowledged the batch within the request's timeout",
            )
        written = future.result()
        if not written.ok:
            return written
        if base < 0:
            base = written.base_offset
    return Written(base_offset=base)


def _sequence_answer(verdict: Verdict, base_offset: int, expected: int | None) -> Written:
    if verdict is Verdict.DUPLICATE:
        return Written(base_offset=base_offset)
    if verdict is Verdict.OLD:
        return Written(ErrorCode.duplicate_sequence_number, message="batch written before")
    if verdict is Verdict.FENCED:
        return Written(
            ErrorCode.invalid_producer_epoch, message="the producer's epoch is not its latest"
        )
    return Written(
        ErrorCode.out_of_order_sequence_number,
        message=f"expected sequence number {expected}",
    )
