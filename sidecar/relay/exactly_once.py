"""The exactly-once relay: consume → encode → produce → offsets, in one Kafka transaction.

Kafka's exactly-once semantics (KIP-98, with KIP-447's consumer-group fencing): the output
records of a batch and the input offsets that produced them are committed together, or not at
all. A consumer of the output topic that reads with `isolation.level=read_committed` sees every
input record exactly once. The loop's commit strategy (`Transactions`, given to the `Relay` in
place of `commits.OffsetCommits`):

1. `init_transactions()` once: a predecessor with the same `transactional.id` (this worker,
   restarted) is fenced and its open transaction aborted at once;
2. the first consumed batch begins a transaction; records are encoded and produced as usual;
3. after `transaction_records` records, or `commit_interval` seconds, the input positions go
   into the transaction with the consumer group's metadata (`send_offsets_to_transaction`,
   which fences a member that lost its partitions in a rebalance) and the transaction commits;
4. errors, by confluent-kafka's taxonomy: *retriable* → the call is retried until the timeout,
   then the relay stops with exit 1 naming the coordinator that did not answer;
   *abortable* (`txn_requires_abort`: a failed delivery, a timed-out commit) → abort, rewind
   the consumer to the last committed offsets and go on; *fatal* (fenced by a newer instance,
   an unrecoverable producer) → stop with exit 1.

Partitions being revoked get the open transaction committed first; lost partitions get it
aborted (the group moved on: committing offsets would be refused). A failure or a stop aborts
or commits the open transaction before closing. Known limits (Kafka's): exactly once holds
within Kafka only, for consumers reading `read_committed`; records reach them at transaction
commits (every `commit_interval`), which is the latency price.

librdkafka does not always keep the timeout of a transactional call: after the broker that
coordinates the group restarts, `send_offsets_to_transaction` can block for good
(confluentinc/librdkafka#5456, #5511; seen here with librdkafka 2.16 on a broker restart). Each
call therefore runs under a watchdog: one still blocked `TXN_TIMEOUT + TXN_GRACE` seconds later
stops the relay (`TransactionHung`, exit 1) without touching the stuck producer again. Nothing of
the open transaction is visible; the restarted relay fences it (same transactional.id) and
resumes from the last commit.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

from sidecar.errors import ClientHung, RelayFailed, TransactionHung
from sidecar.kafka import bounded
from sidecar.logs import get_logger
from sidecar.relay.state import RelayState

log = get_logger(__name__)

#: Seconds a transactional call (init, commit, abort, offsets) may take before it counts as failed.
TXN_TIMEOUT: Final = 30.0
#: Seconds past TXN_TIMEOUT a transactional call may still block before it counts as hung.
TXN_GRACE: Final = 10.0
#: Seconds an abort may wait while no broker answers: librdkafka goes on with it in the
#: background and a later call resumes it, so the loop (and its unreachable check) keeps turning.
ABORT_TIMEOUT_UNREACHABLE: Final = 1.0
#: Aborts in a row (no commit between them) after which the relay stops: the same records keep
#: failing, and reading them again will not change that.
MAX_ABORTS_IN_A_ROW: Final = 5


class Transactions:
    """Exactly once: each batch's records and the input positions in one transaction (a
    `commits.CommitStrategy`, see the module)."""

    def __init__(
        self,
        consumer: Consumer,
        producer: Producer,
        state: RelayState,
        transaction_records: int = 10_000,
    ) -> None:
        """`transaction_records`: records after which the open transaction commits (it also
        commits every `commit_interval` seconds)."""
        self._consumer = consumer
        self._producer = producer
        self._state = state
        self.transaction_records = transaction_records
        self._in_txn = False
        self._txn_records = 0
        self._abort_reason: str | None = None
        #: Transactions aborted so far.
        self.aborted = 0
        self._aborts_in_a_row = 0
        #: Set once a transactional call hung: the producer must not be called again.
        self._hung = False
        #: Set once the coordinator left a call unanswered for TXN_TIMEOUT: an abort at the stop
        #: gets the short timeout (the restarted relay's init_transactions aborts anyway).
        self._coordinator_silent = False
        #: When the first abort that timed out while the brokers answered started (the clock's
        #: time); None when there is none.
        self._abort_unanswered_since: float | None = None
        #: Seconds a transactional call may block before it counts as hung.
        self.call_limit = TXN_TIMEOUT + TXN_GRACE

    @property
    def hung(self) -> bool:
        return self._hung

    @property
    def stuck(self) -> bool:
        return False

    @property
    def pending(self) -> int:
        return self._txn_records

    def error(self, reason: str) -> RelayFailed:
        return TransactionHung(reason) if self._hung else RelayFailed(reason)

    # -- the loop's hooks ----------------------------------------------------------------------

    def start(self) -> bool:
        """`init_transactions()`: a predecessor with the same transactional.id is fenced."""
        return self._call(self._producer.init_transactions, "initialise transactions")

    def begin(self) -> bool:
        if self._in_txn and self._abort_reason is not None:
            # An abort that timed out is finished first. These records are not relayed now: the
            # rewind after the abort reads them again (or a restart does, from the last commit).
            self._abort_and_rewind()
            return False
        if not self._in_txn:
            if not self._call(self._producer.begin_transaction, "begin a transaction"):
                return False
            self._in_txn = True
            self._txn_records = 0
        return True

    def end(self, records: int) -> None:
        self._txn_records += records
        if self._abort_reason is not None:
            self._abort_and_rewind()
        elif self._txn_records >= self.transaction_records:
            self.commit()

    def delivery_failed(self, what: str) -> None:
        # Inside a transaction a failed record aborts the transaction: nothing of it is visible,
        # the input is read again from the last commit.
        if self._abort_reason is None:
            self._abort_reason = what

    def periodic(self, now: float) -> None:
        # The loop's periodic commit is the transaction's: its calls have bounds of their own.
        if self._state.reachability.down_since is None:
            self.commit()

    def commit(self) -> None:
        """Commit the open transaction with the input positions (no-op outside one)."""
        if not self._in_txn:
            return
        state = self._state
        if state.control.failure is not None:
            # Without a broker the abort cannot finish; the restarted relay's
            # init_transactions aborts the transaction anyway.
            if not state.reachability.unreachable:
                self._abort("the relay is stopping after a failure")
            return
        self._producer.flush(TXN_TIMEOUT)
        if self._abort_reason is not None:
            self._abort_and_rewind()
            return
        try:
            assigned = state.assignment.partitions()
            positions = [tp for tp in self._consumer.position(assigned) if tp.offset >= 0]
            metadata = self._consumer.consumer_group_metadata()
        except KafkaException as exc:
            self._txn_error(exc, "read the input positions")
            return
        if not self._call(
            lambda: self._producer.send_offsets_to_transaction(positions, metadata, TXN_TIMEOUT),
            "add the input offsets to the transaction",
        ) or not self._call(
            lambda: self._producer.commit_transaction(TXN_TIMEOUT), "commit the transaction"
        ):
            return
        self._in_txn = False
        self._aborts_in_a_row = 0
        state.metrics.commit(ok=True)
        state.metrics.transaction(committed=True)
        state.stats.commits += 1

    def lost(self) -> None:
        self._abort("partitions lost")

    @property
    def replaceable(self) -> bool:
        """No transaction open (closing the producer would abort it), no call hung."""
        return not self._in_txn and not self._hung

    def use_producer(self, producer: Producer) -> bool:
        """Transactions go on with `producer`, made with the same transactional.id: its
        `init_transactions` fences the old one."""
        self._producer = producer
        return self.start()

    # -- transactions --------------------------------------------------------------------------

    def _call(self, operation: Callable[[], object], what: str) -> bool:
        """Run one transactional call: retry what is retriable, abort what must be aborted,
        stop on the rest. True if it succeeded."""
        if self._hung:
            return False
        started = self._state.clock()
        deadline = time.monotonic() + TXN_TIMEOUT
        while True:
            try:
                bounded(operation, what, self.call_limit)
                return True
            except ClientHung as exc:
                self._hung = True
                self._state.metrics.commit(ok=False)
                self._state.control.fail(self._blamed(str(exc), started))
                return False
            except KafkaException as exc:
                error: KafkaError = exc.args[0]
                if not error.retriable():
                    self._txn_error(exc, what)
                    return False
                if time.monotonic() >= deadline:
                    # Still retriable after TXN_TIMEOUT: the coordinator does not answer (a
                    # broker paused or fenced, or librdkafka's stale coordinator handle, see the
                    # module). Nothing of the open transaction is visible; a restart resumes.
                    self._coordinator_silent = True
                    self._state.metrics.commit(ok=False)
                    self._state.control.fail(
                        self._blamed(
                            f"could not {what}: the transaction coordinator did not answer for "
                            f"{TXN_TIMEOUT:.0f} s ({error.str()}); a restarted relay resumes "
                            "from the last commit",
                            started,
                        )
                    )
                    return False
                log.warning("transaction_retry", step=what, error=error.str())
                time.sleep(0.1)

    def _blamed(self, reason: str, since: float) -> str:
        """`reason`, led by the brokers being unreachable when they are (`Reachability.blamed`)."""
        return self._state.reachability.blamed(self._consumer, reason, since)

    def _txn_error(self, exc: KafkaException, what: str) -> None:
        error: KafkaError = exc.args[0]
        if error.txn_requires_abort():
            self._abort_reason = self._abort_reason or f"could not {what}: {error.str()}"
            self._abort_and_rewind()
        else:
            self._state.metrics.commit(ok=False)
            # A call that timed out while no broker answered: that is the cause to name.
            down_since = self._state.reachability.down_since
            cause = (
                "fatal: the transaction is lost"
                if down_since is None
                else f"no Kafka broker reachable for {self._state.clock() - down_since:.0f} s"
            )
            self._state.control.fail(f"could not {what}: {error.str()} ({cause})")

    def _abort(self, reason: str) -> bool:
        """Abort the open transaction (nothing of it becomes visible); True if it was aborted."""
        if not self._in_txn:
            return True
        if self._hung:
            return False
        silent = self._state.reachability.down_since is not None or self._coordinator_silent
        timeout = ABORT_TIMEOUT_UNREACHABLE if silent else TXN_TIMEOUT
        started = self._state.clock()
        try:
            bounded(
                lambda: self._producer.abort_transaction(timeout),
                "abort the transaction",
                self.call_limit,
            )
        except ClientHung as exc:
            self._hung = True
            self._state.control.fail(self._blamed(str(exc), started))
            return False
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            if error.retriable():
                # Timed out (the coordinator is away): librdkafka resumes the abort when it is
                # called again. Until then nothing is produced (see `begin`); whether the
                # broker is gone for good is the unreachable timeout's call.
                self._abort_reason = self._abort_reason or reason
                if not silent and self._abort_stays_unanswered(started):
                    self._coordinator_silent = True
                    self._state.control.fail(
                        self._blamed(
                            f"could not abort the transaction ({reason}): the transaction "
                            f"coordinator did not answer for {TXN_TIMEOUT:.0f} s "
                            f"({error.str()}); a restarted relay resumes from the last commit",
                            started,
                        )
                    )
                    return False
                log.warning("transaction_abort_retry", reason=reason, error=error.str())
                return False
            self._state.control.fail(f"could not abort the transaction ({reason}): {error.str()}")
            return False
        self._in_txn = False
        self._abort_reason = None
        self._abort_unanswered_since = None
        self.aborted += 1
        self._state.metrics.transaction(committed=False)
        log.warning("transaction_aborted", reason=reason, records=self._txn_records)
        return True

    def _abort_stays_unanswered(self, started: float) -> bool:
        """Whether aborts timing out while the brokers answer have now gone unanswered for
        TXN_TIMEOUT since the first of them (`started`: when this one began).

        After a broker restart librdkafka's connection to the coordinator can stay stuck (its
        requests time out in the out-queue, never sent) while every other connection is back:
        the abort then times out again on each call, for good. Stopping, as a silent
        coordinator does on a commit, lets a restarted relay fence the transaction and resume
        from the last commit.
        """
        if self._abort_unanswered_since is None:
            self._abort_unanswered_since = started
        return self._state.clock() - self._abort_unanswered_since >= TXN_TIMEOUT

    def _abort_and_rewind(self) -> None:
        """Abort, then read again from the last committed offsets of every held partition."""
        reason = self._abort_reason or "abort"
        if not self._abort(reason):
            return
        self._aborts_in_a_row += 1
        if self._aborts_in_a_row >= MAX_ABORTS_IN_A_ROW:
            self._state.control.fail(
                f"{self._aborts_in_a_row} transactions in a row aborted, the last because "
                f"{reason}; the same records keep failing (a dead-letter topic sets them aside)"
            )
            return
        assigned = self._state.assignment.partitions()
        if not assigned:
            return
        try:
            committed = self._consumer.committed(assigned, timeout=TXN_TIMEOUT)
            for tp in committed:
                # Nothing committed yet: the start, as auto.offset.reset=earliest had it.
                offset = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
                self._consumer.seek(TopicPartition(tp.topic, tp.partition, offset))
        except KafkaException as exc:
            error = exc.args[0].str()
            self._state.control.fail(f"could not rewind after an aborted transaction: {error}")
            return
        for tp in assigned:
            # The aborted records are read again; reports still due for them are ignored.
            self._state.offsets.forget(tp.topic, tp.partition)
        log.info(
            "consumer_rewound",
            partitions=[f"{t.topic}[{t.partition}]@{t.offset}" for t in committed],
        )
