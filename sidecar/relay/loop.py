"""The relay's loop: consume → transform → produce → (acknowledged) → commit.

One direction only. The loop, per consumed batch:

1. consume up to `batch_size` records from the assigned input partitions;
2. offer them to the namespace's training reservoir (a strided tap of raw values), then encode
   them per namespace (input topic) with that namespace's encoder, in one call (`--mode
   decode`: decode them; a record that cannot be transformed is set aside, or stops the relay);
3. hand them to the output (`output.Output`): produced in order with the input's key, timestamp
   and headers, each acknowledged for its input record;
4. about every `commit_interval` seconds, commit what is acknowledged, the way the commit
   strategy says (`commits.OffsetCommits`: at least once; `exactly_once.Transactions`).

When the active dictionaries come to choose another batch level (`producer_level`), the
producer is replaced between two batches: the old one flushed, what it delivered committed, the
new one made with the new `compression.level` (and, exactly once, its transactions initialised,
fencing the old one). Logged as `batch_level_changed`.

Partitions being revoked are flushed and committed first. On SIGTERM/SIGINT the loop stops
fetching, flushes, commits and closes (exit 0). A failed delivery, a fatal client error or a
broker unreachable past `unreachable_timeout` stops the relay with a `RelayFailed` (exit 1),
committing only what was acknowledged: a restart re-reads the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final, cast

from confluent_kafka import Consumer, Message, Producer, TopicPartition

from sidecar.codec import Decoder, Outcome, Transformed
from sidecar.errors import ClientHung, CodecError
from sidecar.kafka import bounded, is_max_poll_exceeded, is_partition_eof
from sidecar.live_crossover import MEASURE_INTERVAL, LiveCrossover
from sidecar.logs import get_logger
from sidecar.namespaces import Namespace, Namespaces, Records
from sidecar.relay.commits import CommitStrategy
from sidecar.relay.output import (
    DEFAULT_DELIVERY_TIMEOUT,
    DEFAULT_MAX_RECORD_BYTES,
    Output,
    TopicRoute,
    counted,
)
from sidecar.relay.producer_level import ProducerLevel
from sidecar.relay.state import RelayState, RelayStats
from sidecar.runtime import tune_gc

log = get_logger("sidecar.relay.loop")

#: Seconds the loop waits for input while delivery reports are due: they are served (and their
#: records committed) between two waits.
ACK_WAIT: Final = 0.005
#: Seconds the shutdown waits for deliveries in the normal case, and when no broker answers
#: (their offsets are not committed either way: a restart relays them again).
FLUSH_TIMEOUT: Final = 30.0
UNREACHABLE_FLUSH_TIMEOUT: Final = 5.0
#: Seconds closing the consumer (leaving the group) may take at the stop, in the normal case
#: and when no broker answered: librdkafka's close can wait for good on a stuck coordinator
#: (see `bounded`). The relay then exits without it; the group drops the member when its
#: session times out.
CLOSE_LIMIT: Final = 30.0
UNREACHABLE_CLOSE_LIMIT: Final = 5.0


class Relay:
    """The loop (see the module); clients, state and commit strategy are given, so tests can
    pass their own."""

    def __init__(
        self,
        *,
        consumer: Consumer,
        producer: Producer,
        state: RelayState,
        commits: CommitStrategy,
        outputs: dict[str, str],
        partitions: dict[str, int],
        namespaces: Namespaces | None = None,
        decoder: Decoder | None = None,
        dead_letters: Mapping[str, str] | None = None,
        max_record_bytes: Mapping[str, int] | None = None,
        hold: Mapping[str, float] | None = None,
        batch_size: int = 1000,
        poll_timeout: float = 0.5,
        commit_interval: float = 1.0,
        delivery_timeout: float = DEFAULT_DELIVERY_TIMEOUT,
        on_assignment: Callable[[set[tuple[str, int]]], None] | None = None,
        producer_level: ProducerLevel | None = None,
    ) -> None:
        """Encode with the encoders of `namespaces` (one per input topic, following the store;
        their reservoirs get a tap of the raw input for training), or decode with `decoder`
        (exactly one of the two). `outputs`: input topic -> output topic; `partitions`: per
        topic, its partition count; `dead_letters` (per input topic) take the records that
        cannot be processed; `max_record_bytes` (per output topic) is what a record may weigh;
        `hold` (per input topic, seconds) holds a topic's partitions back until its first
        dictionary is active, at most that long: a backlog is then compressed with a dictionary
        trained from it, not relayed before one exists. `delivery_timeout`: the producer's
        message.timeout.ms in seconds. `on_assignment` is called with the held partitions after
        every change (the trainer's role follows them). The state's `output_modes` (encoding
        only) say which output partitions are written raw (None: frames always).
        `producer_level` (encoding only): the producer is replaced when the active dictionaries
        choose another batch level (None: it keeps the level it was made with)."""
        if (namespaces is None) == (decoder is None):
            raise ValueError("give the relay namespaces to encode or a decoder, not both")
        self.consumer = consumer
        self.producer = producer
        self.state = state
        self.commits = commits
        self.namespaces = namespaces
        self.batch_size = batch_size
        self.poll_timeout = poll_timeout
        self.commit_interval = commit_interval
        self._hold = dict(hold or {})
        #: Topics held back now, with the monotonic time they are let go at the latest.
        self._held: dict[str, float] = {}
        self._on_assignment = on_assignment
        self._level = producer_level if namespaces is not None else None
        self._output = Output(producer, state, commits.delivery_failed, delivery_timeout)
        self._modes = state.output_modes if namespaces is not None else None
        self.routes: dict[str, TopicRoute] = {}
        for topic, output in outputs.items():
            namespace: Namespace | None = None
            transform: Callable[[Records], list[Transformed]]
            if namespaces is not None:
                namespace = namespaces.add(topic)
                topic_metrics, transform = namespace.metrics, namespace.encode
                if self._modes is not None:
                    self._modes.add(
                        topic,
                        output,
                        per_partition=partitions.get(topic) == partitions.get(output),
                        crossover=self._crossover(topic, namespace),
                    )
            else:
                assert decoder is not None
                topic_metrics = state.metrics.namespace(topic, Outcome.DECODE_ALL)
                transform = counted(decoder.decode_batch, topic_metrics)
            self.routes[topic] = TopicRoute(
                topic=topic,
                output=output,
                same_partitions=partitions.get(topic) == partitions.get(output),
                transform=transform,
                namespace=namespace,
                metrics=topic_metrics,
                dead_letter=(dead_letters or {}).get(topic),
                max_record_bytes=(max_record_bytes or {}).get(output, DEFAULT_MAX_RECORD_BYTES),
            )
        state.health.set_encoder_ready(True)

    @property
    def stats(self) -> RelayStats:
        return self.state.stats

    def stop(self) -> None:
        """Ask the loop to finish: stop fetching, flush, commit, close. Signal-handler safe."""
        self.state.control.stop()

    # -- the loop ------------------------------------------------------------------------------

    def run(self) -> RelayStats:
        """Relay until stopped; raises `RelayFailed` if it had to stop to avoid loss."""
        state, control = self.state, self.state.control
        if not self.commits.start():
            self._shutdown()
            raise self.commits.error(control.failure or "could not start committing")
        self._follow_batch_level()
        last_commit = state.clock()
        self._held = {
            topic: last_commit + seconds
            for topic, seconds in self._hold.items()
            if seconds > 0 and topic in self.routes and self._active_id(topic) is None
        }
        for topic, until in self._held.items():
            log.info("backlog_held", topic=topic, wait_seconds=round(until - last_commit, 1))
        state.metrics.join_group()
        self.consumer.subscribe(
            list(self.routes),
            on_assign=self.on_assign,
            on_revoke=self.on_revoke,
            on_lost=self.on_lost,
        )
        log.info("relay_started", topics=list(self.routes))
        with tune_gc():
            while not control.stopping:
                control.take_stall()
                state.health.beat()
                messages = self.consume_batch()
                if messages:
                    self.relay_batch(messages)
                self.producer.poll(0)
                now = state.clock()
                if now - last_commit >= self.commit_interval:
                    self.commits.periodic(now)
                    last_commit = now
                if self.namespaces is not None and self.namespaces.refresh_if_due():
                    self._follow_batch_level()
                if self._held:
                    self._release_held(now)
                if state.reachability.overdue(now):
                    reason = state.reachability.probe(self.consumer, now)
                    if reason is not None:
                        control.fail(reason)
        self._shutdown()
        if control.failure is not None:
            raise self.commits.error(control.failure)
        return state.stats

    def consume_batch(self) -> list[Message]:
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
        wait = ACK_WAIT if self.state.offsets.awaiting() else self.poll_timeout
        messages = consume(1, wait)
        if messages and self.batch_size > 1:
            releases = self.state.assignment.releases
            messages.extend(consume(self.batch_size - 1, 0))
            if self.state.assignment.releases != releases:
                # Partitions were revoked or lost inside the second call: the records the first
                # took from them belong to their new owner, which reads them again from the
                # last commit. Producing them here would only make duplicates. The consumer's
                # events (errors) stay: one may say why the partitions were lost.
                assigned = self.state.assignment
                messages = [
                    m
                    for m in messages
                    if m.error() is not None or (m.topic(), m.partition()) in assigned
                ]
        return messages

    def relay_batch(self, messages: list[Message]) -> None:
        """Transform the records of each input topic in one call, and hand them to the output."""
        if not self.commits.begin():
            return
        control = self.state.control
        for topic, batch in self._by_topic(messages).items():
            if control.failure is not None:
                break
            route = self.routes[topic]
            if route.namespace is not None and route.namespace.reservoir is not None:
                route.namespace.reservoir.offer(batch)
            if self.state.stored is not None:
                self.state.stored.offer(topic, batch)
            # A consumed record's headers are always a list of (str, bytes | None) pairs.
            records = cast(Records, [(m.value(), m.headers()) for m in batch])
            self.state.stats.consumed += len(batch)
            raw = self._modes.split(topic, batch) if self._modes is not None else None
            try:
                if raw is None or route.namespace is None:
                    encoded = route.transform(records)
                else:  # partitions whose batches fill: their values go as they came
                    encoded = route.namespace.encode_with_raw(records, raw)
            except CodecError:
                self._output.one_by_one(route, batch, records)
                continue
            self._output.produce(route, topic, batch, encoded)
        self.commits.end(len(messages))

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
                    self.state.control.fail(
                        f"consume error on {msg.topic()}[{msg.partition()}]: {err.str()}"
                    )
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

    # -- the batch level -----------------------------------------------------------------------

    def _follow_batch_level(self) -> None:
        """Replace the producer when the active dictionaries chose another level than it
        compresses at (see the module). When that cannot be done now, the next look at the
        store (`DICTIONARY_CHECK_INTERVAL`) tries again."""
        levels, namespaces, state = self._level, self.namespaces, self.state
        if levels is None or namespaces is None:
            return
        chosen = levels.wanted(namespaces)
        before, level = levels.level, levels.applied(chosen)
        if level == before:
            levels.chosen = chosen  # a level of the user's, or the same: nothing to replace
            return
        if state.control.failure is not None or self.commits.hung:
            return
        reason = None
        if state.reachability.down_since is not None:
            reason = "no broker answers"
        elif undelivered := self.producer.flush(FLUSH_TIMEOUT):
            reason = f"{undelivered} records not delivered within {FLUSH_TIMEOUT:.0f} s"
        else:
            self.commits.commit()
            if not self._replace_producer(chosen):
                if state.control.failure is not None:
                    return  # the relay stops; its failure line says why
                reason = "the transaction could not be committed"
        if reason is not None:
            log.warning("batch_level_deferred", from_level=before, to_level=level, reason=reason)
            return
        for route in self.routes.values():
            state.metrics.set_batch_level(route.topic, level)
        log.info(
            "batch_level_changed",
            from_level=before,
            to_level=level,
            chosen_level=chosen,
            dict_ids={n.topic: n.active_id for n in namespaces},
        )

    def _replace_producer(self, chosen: int | None) -> bool:
        """Close the producer (flushed: nothing in flight, nothing uncommitted) and go on with
        one made for level `chosen`; False: the commit strategy cannot take it now (a
        transaction is open), or the new one failed to start (the failure says why)."""
        levels = self._level
        assert levels is not None
        if not self.commits.replaceable:
            return False
        self.producer.close()
        self.producer = levels.make(chosen)
        levels.chosen = chosen
        self._output.replace_producer(self.producer)
        if self.state.output_modes is not None:
            self.state.output_modes.producer_replaced(levels.level)
        return self.commits.use_producer(self.producer)

    # -- rebalances (run inside consume, on this thread) ----------------------------------------

    def on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.state.assignment.add(partitions)
        held = [tp for tp in partitions if tp.topic in self._held]
        if held:
            # Paused before anything is fetched: assign here, as the callback may, then pause.
            consumer.assign(partitions)
            consumer.pause(held)
        self._assignment_changed()
        log.info(
            "partitions_assigned", partitions=[f"{p.topic}[{p.partition}]" for p in partitions]
        )

    def on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Before partitions go to another member: deliver what is in flight, commit it."""
        self.producer.flush(30.0)
        self.commits.commit()
        self._release(partitions)
        log.info("partitions_revoked", partitions=[f"{p.topic}[{p.partition}]" for p in partitions])

    def on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Lost, not revoked: the group moved on; committing now would be refused or wrong.
        self.commits.lost()
        self._release(partitions)
        log.warning("partitions_lost", partitions=[f"{p.topic}[{p.partition}]" for p in partitions])

    def _release(self, partitions: list[TopicPartition]) -> None:
        """Partitions revoked or lost: no longer held, tracked or reported (their lag series
        would otherwise stay at its last value beside the new owner's)."""
        state = self.state
        state.assignment.release(partitions)
        for tp in partitions:
            state.offsets.forget(tp.topic, tp.partition)
            state.metrics.remove_partition(tp.topic, tp.partition)
        self._assignment_changed()

    def _assignment_changed(self) -> None:
        assignment = self.state.assignment
        self.state.metrics.set_assigned_partitions(len(assignment))
        if self._on_assignment is not None:
            self._on_assignment(set(assignment.held))

    # -- backlog hold --------------------------------------------------------------------------

    def _crossover(self, topic: str, namespace: Namespace) -> Callable[[str], float | None]:
        """The crossover input `topic`'s output mode reads: measured on its sampled records
        (`live_crossover`) when the relay samples them, else its dictionary's as trained."""
        stored = self.state.stored
        if stored is None:
            return namespace.output_crossover
        sample = stored.sample(topic)
        modes = self.state.output_modes
        #: Per zstd level of the producer (replaced with another level: measured at it).
        live: dict[int | None, LiveCrossover] = {}

        def crossover(codec: str) -> float | None:
            level = modes.level if modes is not None else None
            at_level = live.get(level)
            if at_level is None:
                at_level = live[level] = LiveCrossover(
                    lambda: sample,
                    lambda: namespace.encoder,
                    namespace.output_crossover,
                    level=level,
                    interval=MEASURE_INTERVAL,
                )
            return at_level(codec)

        return crossover

    def _active_id(self, topic: str) -> int | None:
        """The id of `topic`'s active dictionary (None: none, or decoding)."""
        namespace = self.routes[topic].namespace
        return namespace.active_id if namespace is not None else None

    def _release_held(self, now: float) -> None:
        """Let a held topic go once its first dictionary is active, or its wait is over."""
        for topic, until in list(self._held.items()):
            active = self._active_id(topic)
            if active is None and now < until:
                continue
            del self._held[topic]
            paused = [tp for tp in self.state.assignment.partitions() if tp.topic == topic]
            if paused:
                self.consumer.resume(paused)
            log.info(
                "backlog_released",
                topic=topic,
                dict_id=active,
                reason="first dictionary active" if active else "backlog_wait passed",
            )

    # -- the stop ------------------------------------------------------------------------------

    def close_consumer(self) -> None:
        """Close the consumer (leave the group), within `CLOSE_LIMIT` seconds; one that still
        blocks is left behind with an error line (the process exits all the same)."""
        limit = UNREACHABLE_CLOSE_LIMIT if self.state.reachability.unreachable else CLOSE_LIMIT
        try:
            bounded(self.consumer.close, "close the consumer", limit)
        except ClientHung as exc:
            log.error("consumer_close_hung", error=str(exc))

    def _shutdown(self) -> None:
        state = self.state
        state.health.set_stopping()
        failure = state.control.failure
        if self.commits.hung:
            # The producer is stuck inside librdkafka: flushing or aborting would block as well.
            # Leave the group at once, so the partitions move on without a session timeout.
            log.error("transaction_call_hung", reason=failure, records=self.commits.pending)
            self.close_consumer()
            return
        log.info("shutting_down", in_flight=state.offsets.in_flight(), reason=failure or "stop")
        remaining = self.producer.flush(
            UNREACHABLE_FLUSH_TIMEOUT if state.reachability.unreachable else FLUSH_TIMEOUT
        )
        if remaining:
            log.error("flush_incomplete", undelivered=remaining)
        if self.commits.stuck:
            # Committing or closing would wait on the same stuck coordinator; the group drops
            # this member when its session times out.
            log.error("consumer_stuck", reason=failure)
        else:
            self.commits.commit()
            self.close_consumer()
        stats = state.stats
        log.info(
            "relay_stopped",
            consumed=stats.consumed,
            delivered=stats.delivered,
            commits=stats.commits,
            queue_full_waits=stats.queue_full_waits,
            dead_letters=stats.dead_letters,
        )
