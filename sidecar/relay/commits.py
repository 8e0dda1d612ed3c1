"""How the relay commits what it relayed: the strategy the loop is given, and the at-least-once
one (`OffsetCommits`); the exactly-once one is `exactly_once.Transactions`.

At least once: per input partition the committable offset is the first one not yet acknowledged
(`OffsetTracker`), so nothing is committed past a record that is not safely in the output topic.
About every `commit_interval` seconds the loop commits what is committable, asynchronously;
partitions being revoked, and the stop, commit synchronously. A failed delivery stops the relay,
committing nothing past it: a restart re-reads the rest.
"""

from __future__ import annotations

from typing import Final, Protocol

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from sidecar.errors import RelayFailed
from sidecar.kafka import is_no_offset
from sidecar.logs import get_logger
from sidecar.relay.state import RelayState

log = get_logger("sidecar.relay.commits")

#: Seconds an asynchronous offset commit may stay unanswered while brokers answer before the
#: consumer counts as stuck (`run` passes librdkafka's socket.timeout.ms plus 30 s).
COMMIT_LIMIT: Final = 90.0


class CommitStrategy(Protocol):
    """What the loop asks of a way to commit (see the module)."""

    @property
    def hung(self) -> bool:
        """A client call hung: the producer must not be called again (flush, commit, abort)."""
        ...

    @property
    def stuck(self) -> bool:
        """The consumer's commits hang: the stop must not commit or close it."""
        ...

    @property
    def pending(self) -> int:
        """Records relayed since the last commit (for the log line of a hung stop)."""
        ...

    def start(self) -> bool:
        """Before the first record; False: the relay cannot start (the failure says why)."""
        ...

    def begin(self) -> bool:
        """Before a batch is relayed: whether to relay it now."""
        ...

    def end(self, records: int) -> None:
        """After a batch of `records` was handed to the producer."""
        ...

    def delivery_failed(self, what: str) -> None:
        """A record was not delivered (`what` says which and why)."""
        ...

    def periodic(self, now: float) -> None:
        """The loop's commit, every `commit_interval` seconds."""
        ...

    def commit(self) -> None:
        """Commit now and wait for the answer (partitions revoked, the stop)."""
        ...

    def lost(self) -> None:
        """Partitions were lost (the group moved on without this member)."""
        ...

    @property
    def replaceable(self) -> bool:
        """Whether the relay's producer may be closed now (flushed and committed), for another."""
        ...

    def use_producer(self, producer: Producer) -> bool:
        """The relay's producer was replaced by `producer`; False: it failed to start (the
        failure says why)."""
        ...

    def error(self, reason: str) -> RelayFailed:
        """The exception a relay that had to stop for `reason` raises."""
        ...


class CommitLedger:
    """The asynchronous offset commits: when the one under way was sent, and librdkafka's
    answers (`answered`, its commit callback, which may come before the consumer exists)."""

    def __init__(self, state: RelayState) -> None:
        self._state = state
        #: When the unanswered asynchronous commit was sent (None: none outstanding).
        self.sent_at: float | None = None
        #: Set once a commit stayed unanswered past its limit: the consumer is stuck.
        self.stuck = False

    def answered(self, error: KafkaError | None, partitions: list[TopicPartition]) -> None:
        """librdkafka's answer to a commit (served inside the consumer's poll)."""
        self.sent_at = None
        if error is not None:
            # _NO_OFFSET: nothing new to commit; anything else, the next commit retries.
            if not is_no_offset(error):
                self._state.metrics.commit(ok=False)
                log.warning("commit_failed", error=error.str())
            return
        self.committed([tp for tp in partitions if tp.error is None])

    def committed(self, offsets: list[TopicPartition]) -> None:
        """`offsets` were committed: those of partitions still held count."""
        state = self._state
        owned = [tp for tp in offsets if (tp.topic, tp.partition) in state.assignment]
        state.offsets.committed(owned)
        state.metrics.commit(ok=True)
        state.stats.commits += 1


class OffsetCommits:
    """At least once: acknowledged offsets committed through the consumer group."""

    def __init__(
        self,
        consumer: Consumer,
        state: RelayState,
        ledger: CommitLedger,
        commit_limit: float = COMMIT_LIMIT,
    ) -> None:
        """`commit_limit`: seconds an asynchronous commit may stay unanswered while brokers
        answer before the consumer counts as stuck."""
        self._consumer = consumer
        self._state = state
        self._ledger = ledger
        self._commit_limit = commit_limit

    @property
    def hung(self) -> bool:
        return False

    @property
    def stuck(self) -> bool:
        return self._ledger.stuck

    @property
    def pending(self) -> int:
        return 0

    def start(self) -> bool:
        return True

    def begin(self) -> bool:
        return True

    def end(self, records: int) -> None:
        pass

    def delivery_failed(self, what: str) -> None:
        """A record was not delivered: stop, committing nothing past it."""
        self._state.control.fail(f"{what}; nothing past it is committed")

    def lost(self) -> None:
        pass

    @property
    def replaceable(self) -> bool:
        return True  # the offsets go through the consumer: the producer holds nothing of them

    def use_producer(self, producer: Producer) -> bool:
        return True

    def error(self, reason: str) -> RelayFailed:
        return RelayFailed(reason)

    def periodic(self, now: float) -> None:
        """Commit what is safe, asynchronously (answered in `CommitLedger.answered`).

        librdkafka does not always answer: after the only broker was paused or restarted, a
        commit can wait for good on a coordinator bound to a retired broker handle (seen with
        py-spy in rd_kafka_commit_queue; confluentinc/librdkafka#5456). Synchronous, that
        blocked the loop for good; asynchronous, the loop goes on, and a commit unanswered for
        `commit_limit` seconds while brokers answer stops the relay (exit 1) so that a restart
        resumes from the last commit. One commit is outstanding at a time. While no broker
        answers nothing can be committed (nor can a commit be answered): the next commit after
        that carries the newer offsets, and the limit counts while brokers answer.
        """
        ledger = self._ledger
        if self._state.reachability.down_since is not None:
            if ledger.sent_at is not None:
                ledger.sent_at = now
            return
        if ledger.sent_at is not None:
            if now - ledger.sent_at > self._commit_limit:
                ledger.stuck = True
                self._state.metrics.commit(ok=False)
                self._state.control.fail(
                    f"an offset commit is still unanswered after {self._commit_limit:.0f} s "
                    "while brokers answer (a known librdkafka hang after a coordinator restart, "
                    "confluentinc/librdkafka#5456); stopping so that a restart resumes from "
                    "the last commit"
                )
            return
        offsets = self._to_commit()
        if offsets and self._send(offsets, wait=False):
            ledger.sent_at = now

    def commit(self) -> None:
        """Commit what is safe and wait for the answer (revocation and shutdown)."""
        offsets = self._to_commit()
        if not offsets or self._ledger.stuck:
            return
        if self._state.reachability.unreachable:
            # Stopping because no broker answered: a synchronous commit could wait for good.
            # Sent asynchronously, it is answered (or not) while the bounded close waits.
            self._send(offsets, wait=False)
        elif self._send(offsets, wait=True):
            self._ledger.committed(offsets)

    def _to_commit(self) -> list[TopicPartition]:
        """What is safe to commit, of the partitions this member holds. A partition it no
        longer holds is forgotten: a commit for it would overwrite its new owner's offset."""
        tracker, assignment = self._state.offsets, self._state.assignment
        offsets = tracker.to_commit()
        held = [tp for tp in offsets if (tp.topic, tp.partition) in assignment]
        if len(held) < len(offsets):
            for tp in offsets:
                if (tp.topic, tp.partition) not in assignment:
                    tracker.forget(tp.topic, tp.partition)
        return held

    def _send(self, offsets: list[TopicPartition], wait: bool) -> bool:
        """Commit `offsets` (and `wait` for the answer); False if the consumer refused."""
        try:
            if wait:
                self._consumer.commit(offsets=offsets, asynchronous=False)
            else:
                self._consumer.commit(offsets=offsets, asynchronous=True)
        except Exception as exc:  # a KafkaException: the next commit retries with newer offsets
            self._state.metrics.commit(ok=False)
            log.warning("commit_failed", error=str(exc))
            return False
        return True
