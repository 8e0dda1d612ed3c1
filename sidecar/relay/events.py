"""What librdkafka reports to the relay through its clients' callbacks (run inside `consume`,
`poll` and `flush`, on the relay's thread): errors, statistics, commit answers.

Made before the clients it is given to, from the parts it reports into.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from confluent_kafka import KafkaError, TopicPartition

from sidecar.kafka import ErrorLog, is_all_brokers_down, is_authentication
from sidecar.logs import get_logger
from sidecar.relay.state import RelayState

log = get_logger("sidecar.relay.events")

CommitAnswer = Callable[[KafkaError | None, list[TopicPartition]], None]


class ClientEvents:
    """librdkafka's callbacks for the relay's consumer and producer."""

    def __init__(
        self,
        state: RelayState,
        commit_answered: CommitAnswer,
        error_log: ErrorLog | None = None,
    ) -> None:
        """`commit_answered` takes the answers to asynchronous commits."""
        self._state = state
        self._commit_answered = commit_answered
        self._error_log = error_log if error_log is not None else ErrorLog(state.clock)

    def on_error(self, error: KafkaError) -> None:
        """error_cb: fatal errors stop the relay; 'all brokers down' starts a clock."""
        control = self._state.control
        if error.fatal():
            control.fail(f"fatal Kafka client error: {error.str()}")
        elif is_all_brokers_down(error):
            self._state.reachability.down()
            log.warning("brokers_unreachable", error=error.str())
        elif is_authentication(error):
            control.fail(f"Kafka authentication failed: {error.str()}")
        else:
            self._error_log.log(error)

    def on_commit(self, error: KafkaError | None, partitions: list[TopicPartition]) -> None:
        """on_commit: the answer to an asynchronous offset commit."""
        self._commit_answered(error, partitions)

    def on_stats(self, stats_json: str) -> None:
        """stats_cb (every statistics.interval.ms): the consumer's lag per partition, the
        producer's record batches per output topic (what they store, `relay.stored`, and their
        fills, for the output modes)."""
        try:
            stats = json.loads(stats_json)
        except ValueError:
            return
        topics = stats.get("topics", {})
        if stats.get("type") == "producer":
            if self._state.stored is not None:
                self._state.stored.on_producer_stats(topics)
            if self._state.output_modes is not None:
                self._state.output_modes.on_producer_stats(topics)
            return
        metrics, assignment = self._state.metrics, self._state.assignment
        for topic, data in topics.items():
            for part, pdata in data.get("partitions", {}).items():
                partition = int(part)
                lag = pdata.get("consumer_lag", -1)
                if partition >= 0 and lag >= 0 and (topic, partition) in assignment:
                    metrics.set_lag(topic, partition, lag)
