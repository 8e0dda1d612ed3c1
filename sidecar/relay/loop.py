"""The relay: consume → encode → produce → (acknowledged) → commit, at least once.

One direction only. The loop, per consumed batch:

1. consume up to `batch_size` records from the assigned input partitions;
2. offer them to the namespace's training reservoir (a strided tap of raw values), then encode
   them per namespace (input topic) with that namespace's encoder, in one call (`--mode
   decode`: decode them; a record that cannot be transformed stops the relay there);
3. produce each output record with the input's key, timestamp and headers, to the same
   partition number when input and output have as many partitions (else by key); a full producer
   queue is drained (`poll`) and the record retried, never dropped;
4. per input partition, the last record of the batch carries a delivery report that stands for
   the records before it (an idempotent producer with `enable.gapless.guarantee` keeps them in
   order and cannot lose one alone, see `offsets`); records partitioned by key and dead letters
   carry their own. A report marks its records done; per input partition the committable offset
   is the first one not yet acknowledged, so nothing is committed past a record that is not
   safely in the output topic;
5. about every `commit_interval` seconds, commit what is committable.

Partitions being revoked are flushed and committed first. On SIGTERM/SIGINT the loop stops
fetching, flushes, commits and closes (exit 0). A failed delivery, a fatal client error or a
broker unreachable past `unreachable_timeout` stops the relay with a `RelayFailed` (exit 1),
committing only what was acknowledged: a restart re-reads the rest.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, cast

import structlog
from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from sidecar.codec import CodecStats, Decoder, Encoded, Encoder, Outcome
from sidecar.dictionaries.store import DictionaryStore
from sidecar.errors import ClientHung, CodecError, RecordTooLarge, RelayFailed, ZdictError
from sidecar.health import Health
from sidecar.kafka import (
    LIBRDKAFKA_MESSAGE_TIMEOUT_MS,
    is_all_brokers_down,
    is_authentication,
    is_max_poll_exceeded,
    is_no_offset,
    is_partition_eof,
)
from sidecar.metrics import Metrics, NamespaceMetrics
from sidecar.relay.dead_letters import error_headers, record_size
from sidecar.relay.offsets import OffsetTracker, Unit
from sidecar.runtime import tune_gc
from sidecar.training.sampling import Reservoir

log = structlog.get_logger("sidecar.relay.loop")

Records = list[tuple[bytes | None, list[tuple[str, bytes | None]] | None]]

#: Seconds between checks of the store for a newly activated dictionary.
DICTIONARY_CHECK_INTERVAL: Final = 5.0
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
#: Seconds the loop waits for input while delivery reports are due: they are served (and their
#: records committed) between two waits.
ACK_WAIT: Final = 0.005
#: Seconds between two `record_set_aside` log lines of one namespace (counts are in metrics).
DEAD_LETTER_LOG_INTERVAL: Final = 10.0
#: Seconds the shutdown waits for deliveries in the normal case, and when no broker answers
#: (their offsets are not committed either way: a restart relays them again).
FLUSH_TIMEOUT: Final = 30.0
UNREACHABLE_FLUSH_TIMEOUT: Final = 5.0
#: Seconds a metadata request may wait to tell whether any broker answers at all.
UNREACHABLE_PROBE_TIMEOUT: Final = 5.0
#: Seconds closing the consumer (leaving the group) may take at the stop, in the normal case
#: and when no broker answered: librdkafka's close can wait for good on a stuck coordinator
#: (see `bounded`). The relay then exits without it; the group drops the member when its
#: session times out.
CLOSE_LIMIT: Final = 30.0
UNREACHABLE_CLOSE_LIMIT: Final = 5.0
#: Seconds an asynchronous offset commit may stay unanswered while brokers answer before the
#: consumer counts as stuck (`run` passes librdkafka's socket.timeout.ms plus 30 s).
COMMIT_LIMIT: Final = 90.0
#: Seconds between two `kafka_error` lines of one error code: while a broker is away librdkafka
#: reports every failed reconnection (several a second, each also in its own log line).
KAFKA_ERROR_LOG_INTERVAL: Final = 10.0
#: Seconds a produced record may wait for its acknowledgement before the producer fails it
#: (librdkafka's default message.timeout.ms; `run` passes the producer's own).
DEFAULT_DELIVERY_TIMEOUT: Final = LIBRDKAFKA_MESSAGE_TIMEOUT_MS / 1000


def bounded(operation: Callable[[], object], what: str, limit: float) -> None:
    """Run `operation` on a daemon thread; raise `ClientHung` if it is still running after
    `limit` seconds (its exception, if it raised one within the limit).

    librdkafka does not always return: after the broker coordinating a transaction was away
    and came back, send_offsets_to_transaction can block for good (confluentinc/librdkafka#5456,
    #5511; seen with librdkafka 2.16 after the only broker restarted or was paused). Stopping,
    and letting a restart resume from the last commit, beats a relay that hangs. (Not for the
    consumer's synchronous commit: run on another thread it can wait for a rebalance that only
    the relay thread, waiting for it, can serve; the loop commits asynchronously instead, see
    `Relay.commit_in_background`.)
    """
    done = threading.Event()
    raised: list[BaseException] = []

    def call() -> None:
        try:
            operation()
        except BaseException as exc:  # handed to the waiting thread, which re-raises it
            raised.append(exc)
        finally:
            done.set()

    # A daemon: a call that never returns must not keep the process from exiting.
    threading.Thread(target=call, name="zdict-client-call", daemon=True).start()
    if not done.wait(limit):
        raise ClientHung(
            f"the Kafka client call to {what} still blocks after {limit:.0f} s (a known "
            "librdkafka hang after a coordinator restart, confluentinc/librdkafka#5456); "
            "stopping so that a restart resumes from the last commit"
        )
    if raised:
        raise raised[0]


@dataclass(slots=True)
class _Route:
    """Per input topic: where its records go and how they are encoded (or decoded)."""

    topic: str
    output: str
    same_partitions: bool
    #: The batch transform: `encoder.encode_batch`, or `Decoder.decode_batch` in decode mode.
    transform: Callable[[Records], list[Encoded]]
    encoder: Encoder | None
    metrics: NamespaceMetrics
    active_id: int | None
    reservoir: Reservoir | None
    #: Where records that cannot be processed go (None: the relay stops at them).
    dead_letter: str | None = None
    #: Bytes the output topic and the producer accept for one record.
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
    dead_letter_logged: float = -1e18


@dataclass(slots=True)
class RelayStats:
    """Totals of one relay run, for the shutdown log line and tests."""

    consumed: int = 0
    produced: int = 0
    delivered: int = 0
    commits: int = 0
    queue_full_waits: int = 0
    dead_letters: int = 0
    errors: list[str] = field(default_factory=list)


class Relay:
    """The loop; clients, store, metrics and health are given, so tests can pass their own."""

    def __init__(
        self,
        *,
        consumer: Consumer,
        producer: Producer,
        store: DictionaryStore,
        outputs: dict[str, str],
        partitions: dict[str, int],
        metrics: Metrics,
        health: Health,
        encoder_factory: Callable[[DictionaryStore, str], Encoder] | None = None,
        decoder: Decoder | None = None,
        reservoirs: Mapping[str, Reservoir] | None = None,
        dead_letters: Mapping[str, str] | None = None,
        max_record_bytes: Mapping[str, int] | None = None,
        hold: Mapping[str, float] | None = None,
        batch_size: int = 1000,
        poll_timeout: float = 0.5,
        commit_interval: float = 1.0,
        unreachable_timeout: float = 60.0,
        commit_limit: float = COMMIT_LIMIT,
        delivery_timeout: float = DEFAULT_DELIVERY_TIMEOUT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Encode with `encoder_factory`'s encoders (following the store), or decode with
        `decoder` (exactly one of the two). `reservoirs` (per input topic) get a tap of the
        raw input for training; `dead_letters` (per input topic) take the records that cannot
        be processed; `max_record_bytes` (per output topic) is what a record may weigh; `hold`
        (per input topic, seconds) holds a topic's partitions back until its first dictionary
        is active, at most that long: a backlog is then compressed with a dictionary trained
        from it, not relayed before one exists. `delivery_timeout` is the producer's
        message.timeout.ms in seconds (`sidecar.kafka.delivery_timeout`): a report that comes
        later may stand for a record that timed out unseen."""
        if (encoder_factory is None) == (decoder is None):
            raise ValueError("give the relay an encoder_factory or a decoder, not both")
        self.consumer = consumer
        self.producer = producer
        self.store = store
        self.metrics = metrics
        self.health = health
        self.batch_size = batch_size
        self.poll_timeout = poll_timeout
        self.commit_interval = commit_interval
        self.unreachable_timeout = unreachable_timeout
        self.commit_limit = commit_limit
        self.delivery_timeout = delivery_timeout
        self._hold = dict(hold or {})
        #: Topics held back now, with the monotonic time they are let go at the latest.
        self._held: dict[str, float] = {}
        self.clock = clock
        self._encoder_factory = encoder_factory
        self.offsets = OffsetTracker()
        self.stats = RelayStats()
        self._stop = threading.Event()
        self._failure: str | None = None
        self._down_since: float | None = None
        self._unreachable = False
        #: When the unanswered asynchronous commit was sent (None: none outstanding).
        self._commit_sent_at: float | None = None
        #: Set once a commit stayed unanswered past `commit_limit`: the consumer is stuck.
        self._consumer_stuck = False
        #: Error code -> (when its last `kafka_error` line was logged, occurrences since).
        self._kafka_errors: dict[str, tuple[float, int]] = {}
        self._assigned: set[tuple[str, int]] = set()
        #: Rebalances that took partitions away (revoked or lost), counted by `_release`.
        self._releases = 0
        #: Records acknowledged since the last latency observation.
        self._unobserved = 0
        self._refresh_requested = False
        #: Called with the held partitions after every change (the trainer's role follows).
        self.on_assignment: Callable[[set[tuple[str, int]]], None] | None = None
        self.routes: dict[str, _Route] = {}
        for topic, output in outputs.items():
            same = partitions.get(topic) == partitions.get(output)
            reservoir = (reservoirs or {}).get(topic)
            dead_letter = (dead_letters or {}).get(topic)
            limit = (max_record_bytes or {}).get(output, DEFAULT_MAX_RECORD_BYTES)
            if decoder is not None:
                self.routes[topic] = _Route(
                    topic=topic,
                    output=output,
                    same_partitions=same,
                    transform=decoder.decode_batch,
                    encoder=None,
                    metrics=metrics.namespace(topic, Outcome.DECODE_ALL),
                    active_id=None,
                    reservoir=reservoir,
                    dead_letter=dead_letter,
                    max_record_bytes=limit,
                )
                continue
            assert encoder_factory is not None
            encoder = encoder_factory(store, topic)
            self.routes[topic] = _Route(
                topic=topic,
                output=output,
                same_partitions=same,
                transform=encoder.encode_batch,
                encoder=encoder,
                metrics=metrics.namespace(topic),
                active_id=encoder.dict_id or None,
                reservoir=reservoir,
                dead_letter=dead_letter,
                max_record_bytes=limit,
            )
            self._announce_encoder(self.routes[topic])
        health.set_encoder_ready(True)

    def encoder_stats(self, topic: str) -> CodecStats:
        """The current encoder's counts for `topic` (empty in decode mode)."""
        encoder = self.routes[topic].encoder
        return encoder.stats if encoder is not None else CodecStats()

    def request_refresh(self) -> None:
        """Re-read the store's active dictionaries at the next loop turn (thread-safe)."""
        self._refresh_requested = True

    # -- callbacks (run inside consume/poll/flush on this thread) ------------------------------

    def on_error(self, error: KafkaError) -> None:
        """librdkafka's error_cb: fatal errors stop the relay; 'all brokers down' starts a clock."""
        if error.fatal():
            self.fail(f"fatal Kafka client error: {error.str()}")
        elif is_all_brokers_down(error):
            if self._down_since is None:
                self._down_since = self.clock()
            log.warning("brokers_unreachable", error=error.str())
        elif is_authentication(error):
            self.fail(f"Kafka authentication failed: {error.str()}")
        else:
            self._log_kafka_error(error)

    def _log_kafka_error(self, error: KafkaError) -> None:
        """One `kafka_error` line per error code every KAFKA_ERROR_LOG_INTERVAL seconds, with
        how often it occurred in between (`repeated`)."""
        code = error.name()
        now = self.clock()
        logged = self._kafka_errors.get(code)
        if logged is not None and now - logged[0] < KAFKA_ERROR_LOG_INTERVAL:
            self._kafka_errors[code] = (logged[0], logged[1] + 1)
            return
        self._kafka_errors[code] = (now, 0)
        repeated = logged[1] if logged is not None else 0
        log.warning("kafka_error", error=error.str(), code=code, repeated=repeated)

    def _report_for(
        self, route: _Route, topic: str, partition: int, target: str, unit: Unit
    ) -> Callable[[KafkaError | None, Message], None]:
        """The delivery report of `unit`: its records are acknowledged when it arrives without
        an error, and soon enough that none of them could have timed out unseen before it."""

        def delivered(err: KafkaError | None, msg: Message) -> None:
            where = f"{topic}[{partition}]@{unit.first}"
            if unit.last != unit.first:
                where += f"..{unit.last}"
            if err is not None:
                self.metrics.produce_error(err.name())
                self._delivery_failed(f"delivery of {where} to {target} failed: {err.str()}")
                return
            waited = self.clock() - unit.started
            if waited >= self.delivery_timeout:
                # A record before the reported one may have timed out in the producer (the one
                # failure `enable.gapless.guarantee` lets through) without a report of its own.
                self._delivery_failed(
                    f"delivery of {where} to {target} was acknowledged {waited:.0f} s after it "
                    f"began, past the producer's message.timeout.ms ({self.delivery_timeout:.0f} "
                    "s): a record of it may have timed out unseen"
                )
                return
            self._down_since = None
            self.stats.delivered += unit.count
            self.offsets.acked(topic, partition, unit)
            self._unobserved += unit.count
            if self._unobserved >= LATENCY_SAMPLE_EVERY and unit.timestamp > 0:
                self._unobserved = 0
                # The unit's oldest record: the latency is never understated.
                route.metrics.observe_delivery_latency(time.time() - unit.timestamp / 1000.0)

        return delivered

    def _delivery_failed(self, what: str) -> None:
        """A record was not delivered: stop, committing nothing past it."""
        self.fail(f"{what}; nothing past it is committed")

    def on_stats(self, stats_json: str) -> None:
        """librdkafka's statistics (every statistics.interval.ms): the consumer's lag per
        partition, the producer's record batches per output topic."""
        try:
            stats = json.loads(stats_json)
        except ValueError:
            return
        topics = stats.get("topics", {})
        if stats.get("type") == "producer":
            self._on_producer_stats(topics)
            return
        for topic, data in topics.items():
            for part, pdata in data.get("partitions", {}).items():
                partition = int(part)
                lag = pdata.get("consumer_lag", -1)
                if partition >= 0 and lag >= 0 and (topic, partition) in self._assigned:
                    self.metrics.set_lag(topic, partition, lag)

    def _on_producer_stats(self, topics: dict[str, Any]) -> None:
        """The record batches of the last statistics window, per output topic, counted under
        the input topic whose output it is (under its own name when inputs share it); the
        dead-letter topics are left out. librdkafka's `batchsize` window holds each batch's
        size as sent, header and batch compression included (checked against the broker's log
        segments): what the broker stores. `batchcnt` holds its record count."""
        owners: dict[str, list[str]] = {}
        for route in self.routes.values():
            owners.setdefault(route.output, []).append(route.topic)
        for output, data in topics.items():
            inputs = owners.get(output)
            if inputs is None:
                continue
            size, count = data.get("batchsize", {}), data.get("batchcnt", {})
            self.metrics.observe_output_batches(
                inputs[0] if len(inputs) == 1 else output,
                int(size.get("cnt", 0)),
                int(count.get("sum", 0)),
                int(size.get("sum", 0)),
            )

    def on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self._assigned.add((tp.topic, tp.partition))
        held = [tp for tp in partitions if tp.topic in self._held]
        if held:
            # Paused before anything is fetched: assign here, as the callback may, then pause.
            consumer.assign(partitions)
            consumer.pause(held)
        self._set_assigned()
        log.info(
            "partitions_assigned", partitions=[f"{p.topic}[{p.partition}]" for p in partitions]
        )

    def on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Before partitions go to another member: deliver what is in flight, commit it."""
        self.producer.flush(30.0)
        self.commit()
        self._release(partitions)
        log.info("partitions_revoked", partitions=[f"{p.topic}[{p.partition}]" for p in partitions])

    def on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Lost, not revoked: the group moved on; committing now would be refused or wrong.
        self._release(partitions)
        log.warning("partitions_lost", partitions=[f"{p.topic}[{p.partition}]" for p in partitions])

    def _release(self, partitions: list[TopicPartition]) -> None:
        """Partitions revoked or lost: no longer held, tracked or reported (their lag series
        would otherwise stay at its last value beside the new owner's)."""
        for tp in partitions:
            self._assigned.discard((tp.topic, tp.partition))
            self.offsets.forget(tp.topic, tp.partition)
            self.metrics.remove_partition(tp.topic, tp.partition)
        self._releases += 1
        self._set_assigned()

    def _set_assigned(self) -> None:
        self.metrics.set_assigned_partitions(len(self._assigned))
        if self.on_assignment is not None:
            self.on_assignment(set(self._assigned))

    # -- control -------------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask the loop to finish: stop fetching, flush, commit, close. Signal-handler safe."""
        self._stop.set()

    def fail(self, reason: str) -> None:
        if self._failure is None:
            self._failure = reason
            self.stats.errors.append(reason)
        self._stop.set()

    def _to_commit(self) -> list[TopicPartition]:
        """What is safe to commit, of the partitions this member holds. A partition it no
        longer holds is forgotten: a commit for it would overwrite its new owner's offset."""
        offsets = self.offsets.to_commit()
        held = [tp for tp in offsets if (tp.topic, tp.partition) in self._assigned]
        if len(held) < len(offsets):
            for tp in offsets:
                if (tp.topic, tp.partition) not in self._assigned:
                    self.offsets.forget(tp.topic, tp.partition)
        return held

    def commit(self) -> None:
        """Commit what is safe and wait for the answer (revocation and shutdown)."""
        offsets = self._to_commit()
        if not offsets or self._consumer_stuck:
            return
        if self._unreachable:
            # Stopping because no broker answered: a synchronous commit could wait for good.
            # Sent asynchronously, it is answered (or not) while the bounded close waits.
            self._send_commit(offsets, wait=False)
        elif self._send_commit(offsets, wait=True):
            self._committed(offsets)

    def commit_in_background(self) -> None:
        """The loop's periodic commit: asynchronous, answered in `on_commit`.

        librdkafka does not always answer: after the only broker was paused or restarted, a
        commit can wait for good on a coordinator bound to a retired broker handle (seen with
        py-spy in rd_kafka_commit_queue; confluentinc/librdkafka#5456). Synchronous, that
        blocked the loop for good; asynchronous, the loop goes on, and a commit unanswered for
        `commit_limit` seconds while brokers answer stops the relay (exit 1) so that a restart
        resumes from the last commit. One commit is outstanding at a time.
        """
        now = self.clock()
        if self._commit_sent_at is not None:
            if now - self._commit_sent_at > self.commit_limit:
                self._consumer_stuck = True
                self.metrics.commit(ok=False)
                self.fail(
                    f"an offset commit is still unanswered after {self.commit_limit:.0f} s while "
                    "brokers answer (a known librdkafka hang after a coordinator restart, "
                    "confluentinc/librdkafka#5456); stopping so that a restart resumes from "
                    "the last commit"
                )
            return
        offsets = self._to_commit()
        if offsets and self._send_commit(offsets, wait=False):
            self._commit_sent_at = now

    def _send_commit(self, offsets: list[TopicPartition], wait: bool) -> bool:
        """Commit `offsets` (and `wait` for the answer); False if the consumer refused."""
        try:
            if wait:
                self.consumer.commit(offsets=offsets, asynchronous=False)
            else:
                self.consumer.commit(offsets=offsets, asynchronous=True)
        except Exception as exc:  # a KafkaException: the next commit retries with newer offsets
            self.metrics.commit(ok=False)
            log.warning("commit_failed", error=str(exc))
            return False
        return True

    def on_commit(self, error: KafkaError | None, partitions: list[TopicPartition]) -> None:
        """librdkafka's answer to a commit (served inside the consumer's poll)."""
        self._commit_sent_at = None
        if error is not None:
            # _NO_OFFSET: nothing new to commit; anything else, the next commit retries.
            if not is_no_offset(error):
                self.metrics.commit(ok=False)
                log.warning("commit_failed", error=error.str())
            return
        self._committed([tp for tp in partitions if tp.error is None])

    def _committed(self, offsets: list[TopicPartition]) -> None:
        owned = [tp for tp in offsets if (tp.topic, tp.partition) in self._assigned]
        self.offsets.committed(owned)
        self.metrics.commit(ok=True)
        self.stats.commits += 1

    # -- the loop ------------------------------------------------------------------------------

    def run(self) -> RelayStats:
        """Relay until stopped; raises `RelayFailed` if it had to stop to avoid loss."""
        last_commit = last_dict_check = self.clock()
        self._held = {
            topic: last_commit + seconds
            for topic, seconds in self._hold.items()
            if seconds > 0 and topic in self.routes and self.routes[topic].active_id is None
        }
        for topic, until in self._held.items():
            log.info("backlog_held", topic=topic, wait_seconds=round(until - last_commit, 1))
        self.consumer.subscribe(
            list(self.routes),
            on_assign=self.on_assign,
            on_revoke=self.on_revoke,
            on_lost=self.on_lost,
        )
        log.info("relay_started", topics=list(self.routes))
        with tune_gc():
            while not self._stop.is_set():
                self.health.beat()
                messages = self._consume()
                if messages:
                    self._relay_batch(messages)
                self.producer.poll(0)
                now = self.clock()
                # While no broker answers nothing can be committed (nor can a commit be
                # answered); the next commit after that carries the newer offsets.
                if now - last_commit >= self.commit_interval:
                    if self._down_since is None:
                        self.commit_in_background()
                    elif self._commit_sent_at is not None:
                        self._commit_sent_at = now  # the limit counts while brokers answer
                    last_commit = now
                if self._refresh_requested or now - last_dict_check >= DICTIONARY_CHECK_INTERVAL:
                    self._refresh_requested = False
                    self._refresh_encoders()
                    last_dict_check = now
                if self._held:
                    self._release_held(now)
                if (
                    self._down_since is not None
                    and now - self._down_since > self.unreachable_timeout
                ):
                    self._check_still_unreachable(now)
        self._shutdown()
        if self._failure is not None:
            raise RelayFailed(self._failure)
        return self.stats

    def _release_held(self, now: float) -> None:
        """Let a held topic go once its first dictionary is active, or its wait is over."""
        for topic, until in list(self._held.items()):
            active = self.routes[topic].active_id
            if active is None and now < until:
                continue
            del self._held[topic]
            paused = [TopicPartition(t, p) for t, p in self._assigned if t == topic]
            if paused:
                self.consumer.resume(paused)
            log.info(
                "backlog_released",
                topic=topic,
                dict_id=active,
                reason="first dictionary active" if active else "backlog_wait passed",
            )

    def _consume(self) -> list[Message]:
        """The records that have arrived, up to `batch_size`, without waiting for a full batch.

        `consume(n, timeout)` waits until it has `n` records or the timeout passes: at 20,000
        records/s a batch of 1,000 took 50 ms to fill, and every record waited for it. So: take
        what is there; when nothing is, wait for the first record only (briefly while records are
        in flight, so their acknowledgements are served and committed), then take what came with
        it.
        """
        consume = self.consumer.consume
        messages = consume(self.batch_size, 0)
        if messages:
            return messages
        wait = ACK_WAIT if self.offsets.awaiting() else self.poll_timeout
        messages = consume(1, wait)
        if messages and self.batch_size > 1:
            releases = self._releases
            messages.extend(consume(self.batch_size - 1, 0))
            if self._releases != releases:
                # Partitions were revoked or lost inside the second call: the records the first
                # took from them belong to their new owner, which reads them again from the
                # last commit. Producing them here would only make duplicates. The consumer's
                # events (errors) stay: one may say why the partitions were lost.
                assigned = self._assigned
                messages = [
                    m
                    for m in messages
                    if m.error() is not None or (m.topic(), m.partition()) in assigned
                ]
        return messages

    def _check_still_unreachable(self, now: float) -> None:
        """Fail if the brokers are still down; an idle relay has seen no delivery to tell it."""
        assert self._down_since is not None
        try:
            self.consumer.list_topics(timeout=UNREACHABLE_PROBE_TIMEOUT)
        except KafkaException:
            self._unreachable = True
            self.fail(
                f"no Kafka broker reachable for {now - self._down_since:.0f} s "
                f"(unreachable_timeout {self.unreachable_timeout:.0f} s)"
            )
            return
        log.info("brokers_reachable_again", down_seconds=round(now - self._down_since, 1))
        self._down_since = None

    def _relay_batch(self, messages: list[Message]) -> None:
        for topic, batch in self._by_topic(messages).items():
            if self._failure is not None:
                return
            route = self.routes[topic]
            if route.reservoir is not None:
                route.reservoir.offer(batch)
            started = time.perf_counter()
            # A consumed record's headers are always a list of (str, bytes | None) pairs.
            records = cast(Records, [(m.value(), m.headers()) for m in batch])
            stats = route.encoder.stats if route.encoder is not None else None
            before = (
                (Counter(stats.outcomes), stats.input_bytes, stats.output_bytes) if stats else None
            )
            try:
                encoded = route.transform(records)
            except CodecError:
                self.stats.consumed += len(batch)
                self._relay_one_by_one(route, batch, records, started)
                continue
            seconds = time.perf_counter() - started
            if stats is not None and before is not None:
                # The encoder tallied the batch already: its deltas cost nothing per record.
                outcomes = stats.outcomes.copy()
                outcomes.subtract(before[0])
                route.metrics.observe_counts(
                    outcomes,
                    stats.input_bytes - before[1],
                    stats.output_bytes - before[2],
                    seconds,
                )
            else:
                route.metrics.observe_batch(encoded, seconds)
            self.stats.consumed += len(batch)
            if route.same_partitions:
                self._produce_batch(route, topic, batch, encoded)
            else:
                self._produce_keyed(route, topic, batch, encoded)

    def _by_topic(self, messages: list[Message]) -> dict[str, list[Message]]:
        """The consumed records per input topic, in order, without the consumer's events and
        errors (a fatal one stops the relay: nothing is returned)."""
        records = [m for m in messages if m.error() is None]
        if len(records) != len(messages):
            for msg in messages:
                err = msg.error()
                if err is None or is_partition_eof(err):
                    continue
                if is_max_poll_exceeded(err):
                    # The loop stalled past max.poll.interval.ms: librdkafka left the group and
                    # rejoins at the next poll; the partitions were lost (on_lost), not
                    # committed, so their new owner reads again what was not committed.
                    log.warning("max_poll_interval_exceeded", error=err.str())
                    continue
                if err.fatal() or not err.retriable():
                    self.fail(f"consume error on {msg.topic()}[{msg.partition()}]: {err.str()}")
                    return {}
                log.warning("consume_error", error=err.str())
        if not records:
            return {}
        # Records may come from the client's prefetch queue while no broker answers: only an
        # acknowledged delivery or a metadata answer stops the unreachable clock.
        if len(self.routes) == 1:
            return {next(iter(self.routes)): records}  # subscribed to that topic only
        by_topic: dict[str, list[Message]] = {}
        for msg in records:
            by_topic.setdefault(cast(str, msg.topic()), []).append(msg)
        return by_topic

    def _produce_batch(
        self, route: _Route, topic: str, batch: list[Message], encoded: list[Encoded]
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
        started = self.clock()
        output, offsets = route.output, self.offsets
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
        produce = cast(Any, self.producer).produce
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
                    self.stats.queue_full_waits += 1
                    self.producer.poll(0.1)
                    self.health.beat()
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
            if self._failure is not None:
                break  # nothing after a refused record is produced before it
        self.stats.produced += produced

    def _produce_keyed(
        self, route: _Route, topic: str, batch: list[Message], encoded: list[Encoded]
    ) -> None:
        """Produce a transformed batch in order to an output topic with another partition count,
        partitioned by key: a record's report stands for itself only."""
        fast_limit = route.max_record_bytes - HEADROOM
        produce = cast(Any, self.producer).produce  # positional, as in `_produce_batch`
        output, single = route.output, self.offsets.single
        started = self.clock()
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
                    self.stats.queue_full_waits += 1
                    self.producer.poll(0.1)
                    self.health.beat()
                    self._send(route, msg, output, enc.value, enc.headers, unit, report)
                except KafkaException:
                    self._send(route, msg, output, enc.value, enc.headers, unit, report)
                else:
                    produced += 1
                    continue
            else:
                self._produce_if_it_fits(route, msg, enc)
            if self._failure is not None:
                break
        self.stats.produced += produced

    def _produce_if_it_fits(
        self,
        route: _Route,
        msg: Message,
        enc: Encoded,
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

    def _relay_one_by_one(
        self, route: _Route, batch: list[Message], records: Records, started: float
    ) -> None:
        """The batch failed to transform: do it record by record, setting the bad ones aside.

        Without a dead-letter topic the relay stops at the first bad record: the ones before it
        are still produced (and committed once acknowledged), nothing from it on is, so a restart
        after the cause is fixed resumes exactly there.
        """
        stage = "encode" if route.encoder is not None else "decode"
        done: list[Encoded] = []
        for msg, record in zip(batch, records, strict=True):
            if self._failure is not None:
                break
            try:
                (enc,) = route.transform([record])
            except CodecError as exc:
                self._set_aside(route, msg, stage, exc)
                continue
            done.append(enc)
            self._produce_if_it_fits(route, msg, enc)
        if done:
            route.metrics.observe_batch(done, time.perf_counter() - started)

    def _set_aside(self, route: _Route, msg: Message, stage: str, error: Exception) -> None:
        """A record that cannot be processed: to the dead-letter topic, or stop before it."""
        topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
        assert topic is not None and partition is not None and offset is not None
        where = f"{topic}[{partition}]@{offset}"
        if route.dead_letter is None:
            self.fail(
                f"cannot {stage} {where}: {type(error).__name__}: {error}; nothing from it on is "
                "committed (ZDICT_RELAY__DEAD_LETTER_TOPIC sets such records aside instead)"
            )
            return
        headers = [*(msg.headers() or []), *error_headers(topic, partition, offset, stage, error)]
        route.metrics.dead_letter(stage)
        self.stats.dead_letters += 1
        now = self.clock()
        if now - route.dead_letter_logged >= DEAD_LETTER_LOG_INTERVAL:
            route.dead_letter_logged = now
            log.warning(
                "record_set_aside",
                record=where,
                stage=stage,
                error_class=type(error).__name__,
                error=str(error)[:300],
                dead_letter_topic=route.dead_letter,
                set_aside_so_far=self.stats.dead_letters,
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
            self.offsets.unreported(cast(str, msg.topic()), cast(int, msg.partition()), unit)

    def _send(
        self,
        route: _Route,
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
            started, stamp = self.clock(), ts if ts_type else 0
            if dead_letter or not route.same_partitions:
                unit = self.offsets.single(topic, partition, offset, started, stamp)
            else:
                unit = self.offsets.open(topic, partition, offset, started, stamp)
                unit.count += 1
                unit.last = offset
                self.offsets.reported(topic, partition, unit)
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
                self.producer.produce(target, **kwargs)
                break
            except KafkaException as exc:  # refused outright, e.g. larger than message.max.bytes
                error: KafkaError = exc.args[0]
                self.metrics.produce_error(error.name())
                if not dead_letter and route.dead_letter is not None and not error.retriable():
                    self._leave(msg, unit, report)  # the dead letter replaces it
                    self._set_aside(route, msg, "produce", exc)
                    return
                self.fail(
                    f"cannot produce {topic}[{partition}]@{offset} to {target}: "
                    f"{error.str()}; nothing past it is committed"
                )
                return
            except BufferError:
                # Queue full: let deliveries drain it. Consuming waits meanwhile (backpressure).
                self.stats.queue_full_waits += 1
                self.producer.poll(0.1)
                self.health.beat()
        self.stats.produced += 1

    def _refresh_encoders(self) -> None:
        for route in self.routes.values():
            if route.encoder is None:
                continue  # decoding: every id resolves through the decoder, nothing to switch
            try:
                active = self.store.active_id(route.topic)
            except ZdictError as exc:
                log.error("dictionary_check_failed", namespace=route.topic, error=str(exc))
                continue
            if active != route.active_id:
                try:
                    assert self._encoder_factory is not None
                    route.encoder = self._encoder_factory(self.store, route.topic)
                    route.transform = route.encoder.encode_batch
                except ZdictError as exc:  # keep the current encoder rather than stop
                    log.error("dictionary_load_failed", namespace=route.topic, error=str(exc))
                    route.active_id = active
                    continue
                route.active_id = active
                self._announce_encoder(route)

    def _announce_encoder(self, route: _Route) -> None:
        assert route.encoder is not None
        dictionary = route.encoder.dictionary
        self.metrics.set_dictionary(route.topic, dictionary)
        if dictionary is None:
            log.warning(
                "no_dictionary",
                namespace=route.topic,
                detail="compressing without a dictionary (zd=0) where that still shrinks; "
                "train one with `zdict-sidecar train`",
            )
        else:
            log.info(
                "dictionary_loaded",
                namespace=route.topic,
                dict_id=dictionary.id,
                version=dictionary.meta.version,
                heldout_ratio=dictionary.meta.heldout_ratio,
                level=route.encoder.level,
            )

    def close_consumer(self) -> None:
        """Close the consumer (leave the group), within `CLOSE_LIMIT` seconds; one that still
        blocks is left behind with an error line (the process exits all the same)."""
        limit = UNREACHABLE_CLOSE_LIMIT if self._unreachable else CLOSE_LIMIT
        try:
            bounded(self.consumer.close, "close the consumer", limit)
        except ClientHung as exc:
            log.error("consumer_close_hung", error=str(exc))

    def _shutdown(self) -> None:
        self.health.set_stopping()
        log.info(
            "shutting_down", in_flight=self.offsets.in_flight(), reason=self._failure or "stop"
        )
        remaining = self.producer.flush(
            UNREACHABLE_FLUSH_TIMEOUT if self._unreachable else FLUSH_TIMEOUT
        )
        if remaining:
            log.error("flush_incomplete", undelivered=remaining)
        if self._consumer_stuck:
            # Committing or closing would wait on the same stuck coordinator; the group drops
            # this member when its session times out.
            log.error("consumer_stuck", reason=self._failure)
        else:
            self.commit()
            self.close_consumer()
        log.info(
            "relay_stopped",
            consumed=self.stats.consumed,
            delivered=self.stats.delivered,
            commits=self.stats.commits,
            queue_full_waits=self.stats.queue_full_waits,
            dead_letters=self.stats.dead_letters,
        )
