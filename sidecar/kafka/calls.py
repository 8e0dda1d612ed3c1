"""Living with librdkafka's clients: calls that may never return, error reports that repeat
several times a second, and telling whether any broker answers at all."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Final, Protocol

from confluent_kafka import KafkaError, KafkaException

from sidecar.errors import ClientHung
from sidecar.logs import get_logger

log = get_logger("sidecar.kafka")

#: Seconds between two `kafka_error` lines of one error code: while a broker is away librdkafka
#: reports every failed reconnection (several a second, each also in its own log line).
KAFKA_ERROR_LOG_INTERVAL: Final = 10.0
#: Seconds a metadata request may wait to tell whether any broker answers at all.
UNREACHABLE_PROBE_TIMEOUT: Final = 5.0


def bounded(operation: Callable[[], object], what: str, limit: float) -> None:
    """Run `operation` on a daemon thread; raise `ClientHung` if it is still running after
    `limit` seconds (its exception, if it raised one within the limit).

    librdkafka does not always return: after the broker coordinating a transaction was away
    and came back, send_offsets_to_transaction can block for good (confluentinc/librdkafka#5456,
    #5511; seen with librdkafka 2.16 after the only broker restarted or was paused). Stopping,
    and letting a restart resume from the last commit, beats a process that hangs. (Not for the
    consumer's synchronous commit: run on another thread it can wait for a rebalance that only
    the waiting thread could serve; the relay commits asynchronously instead, see
    `sidecar.relay.commits`.)
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


class ErrorLog:
    """One `kafka_error` line per error code every `KAFKA_ERROR_LOG_INTERVAL` seconds, with how
    often it occurred in between (`repeated`)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        #: Error code -> (when its last line was logged, occurrences since).
        self._logged: dict[str, tuple[float, int]] = {}

    def log(self, error: KafkaError) -> None:
        code = error.name()
        now = self._clock()
        logged = self._logged.get(code)
        if logged is not None and now - logged[0] < KAFKA_ERROR_LOG_INTERVAL:
            self._logged[code] = (logged[0], logged[1] + 1)
            return
        self._logged[code] = (now, 0)
        repeated = logged[1] if logged is not None else 0
        log.warning("kafka_error", error=error.str(), code=code, repeated=repeated)


class ListsTopics(Protocol):
    """A client that can ask the cluster for metadata (a consumer, a producer)."""

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> object: ...


class Reachability:
    """Whether any broker answers: a clock that librdkafka's "all brokers down" starts and any
    answer (an acknowledged delivery, a metadata answer) stops. Records may still come from a
    client's prefetch queue while no broker answers: those do not stop it."""

    def __init__(self, timeout: float, clock: Callable[[], float] = time.monotonic) -> None:
        """`timeout`: seconds without a broker after which the process gives up."""
        self.timeout = timeout
        self._clock = clock
        #: When the brokers were first reported down (None: they answer).
        self.down_since: float | None = None
        #: Set once a probe confirmed that none answers past the timeout.
        self.unreachable = False

    def down(self) -> None:
        """librdkafka reported every broker down: start the clock (if it is not running)."""
        if self.down_since is None:
            self.down_since = self._clock()

    def answered(self) -> None:
        """A broker answered."""
        self.down_since = None

    def overdue(self, now: float) -> bool:
        """Whether the brokers have been down longer than the timeout (time for a `probe`)."""
        return self.down_since is not None and now - self.down_since > self.timeout

    def probe(self, client: ListsTopics, now: float) -> str | None:
        """Ask `client` for metadata: the reason to stop if no broker answers (and mark the
        brokers unreachable); None, the clock stopped, if one does."""
        since = self.down_since if self.down_since is not None else now
        try:
            client.list_topics(timeout=UNREACHABLE_PROBE_TIMEOUT)
        except KafkaException:
            self.unreachable = True
            return (
                f"no Kafka broker reachable for {now - since:.0f} s "
                f"(unreachable_timeout {self.timeout:.0f} s)"
            )
        log.info("brokers_reachable_again", down_seconds=round(now - since, 1))
        self.down_since = None
        return None

    def blamed(self, client: ListsTopics, reason: str, since: float) -> str:
        """`reason` for a call that got no answer since `since` (the clock's time), led by the
        cause to act on when it is that no broker answers at all (the brokers are then marked
        unreachable).

        A call can block for its whole timeout while the brokers are down, before the loop's
        own unreachable check has had a turn: the operator must read that the brokers are
        gone, not only that one call did not return.
        """
        try:
            client.list_topics(timeout=UNREACHABLE_PROBE_TIMEOUT)
        except KafkaException:
            self.unreachable = True
            if self.down_since is not None:
                since = min(since, self.down_since)
            return f"no Kafka broker reachable for {self._clock() - since:.0f} s: {reason}"
        return reason
