"""The exactly-once relay's transaction handling, with spec'd fakes of the clients: the error
paths a real broker cannot produce on demand (retriable, abortable, fatal), and the order of
calls. Its normal behaviour (kill -9, restarts, 0 duplicates) is tested on a real broker in
tests/integration/test_exactly_once.py.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any
from unittest.mock import MagicMock

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from sidecar.config import load_settings
from sidecar.errors import ConfigError, RelayFailed, TransactionHung
from sidecar.kafka import producer_config
from sidecar.relay import exactly_once
from sidecar.relay.loop import Relay
from tests.unit.relay_fakes import Clock, Rig, deliveries, make_relay, record, transactions


@pytest.fixture(autouse=True)
def _a_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    """A broker address: a client's properties cannot be built without one."""
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "k1:9092")


def txn_error(*, retriable: bool = False, abort: bool = False, fatal: bool = False) -> Any:
    error = MagicMock(spec_set=KafkaError)
    error.retriable.return_value = retriable
    error.txn_requires_abort.return_value = abort
    error.fatal.return_value = fatal
    error.str.return_value = "broker said no"
    error.code.return_value = KafkaError._FAIL
    return KafkaException(error)


def make(tmp_path: Path, records: int = 2) -> Rig:
    rig = make_relay(tmp_path, Clock(), commit_interval=60.0, transaction_records=records)
    relay, consumer = rig.relay, rig.consumer
    consumer.position.side_effect = lambda tps: [
        TopicPartition(tp.topic, tp.partition, 5) for tp in tps
    ]
    consumer.committed.side_effect = lambda tps, timeout=None: [
        TopicPartition(tp.topic, tp.partition, 3) for tp in tps
    ]
    relay.on_assign(consumer, [TopicPartition("in", 0)])
    return rig


def feed(relay: Relay, consumer: MagicMock, *batches: list[Any]) -> None:
    remaining = iter(batches)

    def consume(*_: object) -> list[Any]:
        batch = next(remaining, None)
        if not batch:  # an empty batch, or none left: the relay stops after this call
            relay.stop()
            return []
        return batch

    consumer.consume.side_effect = consume


def test_a_batch_is_produced_inside_a_transaction_committed_with_the_input_positions(
    tmp_path: Path,
) -> None:
    relay, consumer, producer, _events = make(tmp_path)
    feed(relay, consumer, [record(3), record(4)])
    relay.run()
    names = [c[0] for c in producer.method_calls if c[0] != "poll"]
    assert names[:2] == ["init_transactions", "begin_transaction"]
    assert names.count("produce") == 2
    assert names.index("send_offsets_to_transaction") < names.index("commit_transaction")
    offsets = producer.send_offsets_to_transaction.call_args.args[0]
    assert [(tp.topic, tp.partition, tp.offset) for tp in offsets] == [("in", 0, 5)]
    consumer.commit.assert_not_called()  # offsets go through the transaction only


def test_a_retriable_commit_error_is_retried(tmp_path: Path) -> None:
    relay, consumer, producer, _events = make(tmp_path)
    producer.commit_transaction.side_effect = [txn_error(retriable=True), None]
    feed(relay, consumer, [record(3), record(4)])
    stats = relay.run()
    assert producer.commit_transaction.call_count == 2
    assert stats.commits == 1 and transactions(relay).aborted == 0


def test_an_abortable_error_aborts_and_rewinds_to_the_committed_offsets(tmp_path: Path) -> None:
    relay, consumer, producer, _events = make(tmp_path)
    producer.commit_transaction.side_effect = [txn_error(abort=True), None]
    feed(relay, consumer, [record(3), record(4)], [record(3), record(4)])
    stats = relay.run()
    assert transactions(relay).aborted == 1
    producer.abort_transaction.assert_called_once()
    (seek,) = consumer.seek.call_args_list
    assert (seek.args[0].topic, seek.args[0].partition, seek.args[0].offset) == ("in", 0, 3)
    assert stats.commits == 1  # the second attempt, after the rewind, committed
    assert stats.errors == []


def test_a_failed_delivery_aborts_the_transaction_instead_of_stopping(tmp_path: Path) -> None:
    relay, consumer, producer, _events = make(tmp_path, records=10)

    failed: list[bool] = []

    def poll(timeout: float = 0) -> int:
        callbacks = deliveries(producer)
        if callbacks and not failed:  # the first record's delivery fails, once
            failed.append(True)
            callbacks[0](KafkaError(KafkaError._MSG_TIMED_OUT), MagicMock())
        return 0

    producer.poll.side_effect = poll
    feed(relay, consumer, [record(3)], [record(4)])
    stats = relay.run()
    assert transactions(relay).aborted >= 1
    assert stats.errors == []
    consumer.seek.assert_called()


def test_a_fatal_error_stops_the_relay_without_committing(tmp_path: Path) -> None:
    relay, consumer, producer, _events = make(tmp_path)
    producer.send_offsets_to_transaction.side_effect = txn_error(fatal=True)
    feed(relay, consumer, [record(3), record(4)])
    with pytest.raises(RelayFailed, match="could not add the input offsets"):
        relay.run()
    producer.commit_transaction.assert_not_called()


def test_a_coordinator_silent_past_the_timeout_stops_the_relay_naming_it_and_aborts_briefly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(exactly_once, "TXN_TIMEOUT", 0.3)
    relay, consumer, producer, _events = make(tmp_path)
    producer.send_offsets_to_transaction.side_effect = txn_error(retriable=True)
    feed(relay, consumer, [record(3), record(4)])
    with pytest.raises(RelayFailed, match="the transaction coordinator did not answer for 0 s"):
        relay.run()
    assert producer.send_offsets_to_transaction.call_count > 1  # retried until the timeout
    producer.commit_transaction.assert_not_called()
    # The stop's abort does not wait another TXN_TIMEOUT on the same silent coordinator.
    producer.abort_transaction.assert_called_once_with(exactly_once.ABORT_TIMEOUT_UNREACHABLE)


def test_fenced_at_start_is_fatal(tmp_path: Path) -> None:
    relay, _, producer, _events = make(tmp_path)
    producer.init_transactions.side_effect = txn_error(fatal=True)
    with pytest.raises(RelayFailed, match="could not initialise transactions"):
        relay.run()
    producer.begin_transaction.assert_not_called()


def test_lost_partitions_abort_the_open_transaction(tmp_path: Path) -> None:
    relay, consumer, producer, _events = make(tmp_path, records=100)
    assert transactions(relay).begin()  # as before a consumed batch
    relay.on_lost(consumer, [TopicPartition("in", 0)])
    producer.abort_transaction.assert_called_once()
    producer.commit_transaction.assert_not_called()


def test_the_transaction_timeout_must_stay_below_the_session_timeout() -> None:
    settings = load_settings(
        producer={"transaction.timeout.ms": "50000"}, consumer={"session.timeout.ms": "45000"}
    )
    with pytest.raises(ConfigError, match="ZDICT_PRODUCER__TRANSACTION_TIMEOUT_MS=50000"):
        producer_config(settings, transactional_id="zdict-x")
    config = producer_config(load_settings(), transactional_id="zdict-x")
    assert config["transaction.timeout.ms"] == "30000"
    assert config["enable.idempotence"] == "true"


def test_a_transactional_id_in_the_producer_settings_is_refused() -> None:
    settings = load_settings(producer={"transactional.id": "mine"})
    with pytest.raises(ConfigError, match="ZDICT_RELAY__GUARANTEE=exactly-once"):
        producer_config(settings)


def test_each_worker_gets_its_own_stable_transactional_id() -> None:
    relay = load_settings(relay={"group_id": "g", "worker_index": 2}).relay
    assert relay.transactional_id_for("host-a") == "zdict-g-host-a-2"
    assert relay.transactional_id_for("host-a") == relay.transactional_id_for("host-a")


def test_a_transactional_call_that_never_returns_stops_the_relay_without_touching_the_producer(
    tmp_path: Path,
) -> None:
    relay, consumer, producer, _events = make(tmp_path)
    transactions(relay).call_limit = 0.2
    never = threading.Event()
    # As librdkafka's send_offsets_to_transaction after a coordinator restart: blocked for good.
    producer.send_offsets_to_transaction.side_effect = lambda *a: never.wait()
    feed(relay, consumer, [record(3), record(4)])
    try:
        with pytest.raises(TransactionHung, match="still blocks after 0 s"):
            relay.run()
    finally:
        never.set()
    producer.commit_transaction.assert_not_called()
    producer.abort_transaction.assert_not_called()
    producer.flush.assert_called_once()  # before the offsets, not at shutdown
    consumer.close.assert_called_once()  # the group is left at once


def test_an_abort_that_times_out_is_retried_before_anything_else_is_produced(
    tmp_path: Path,
) -> None:
    relay, consumer, producer, _events = make(tmp_path)
    producer.commit_transaction.side_effect = [txn_error(abort=True), None]
    # The first abort times out (the coordinator is away); librdkafka resumes it on the next call.
    producer.abort_transaction.side_effect = [txn_error(retriable=True), None]
    feed(relay, consumer, [record(3), record(4)], [record(5)], [record(3), record(4)])
    stats = relay.run()
    assert producer.abort_transaction.call_count == 2
    assert transactions(relay).aborted == 1 and stats.errors == []
    assert producer.produce.call_count == 4  # record 5 came while the abort was pending
    consumer.seek.assert_called()
    assert stats.commits == 1


def test_an_abort_unanswered_for_the_transaction_timeout_while_brokers_answer_stops_the_relay(
    tmp_path: Path,
) -> None:
    # After a broker restart the coordinator connection can stay stuck while the others are
    # back: each abort times out after its whole timeout, for good (seen on a real broker).
    relay, consumer, producer, _events = make(tmp_path)
    clock = relay.state.clock
    assert isinstance(clock, Clock)
    producer.commit_transaction.side_effect = txn_error(abort=True)

    def unanswered(timeout: float) -> None:
        clock.now += timeout
        raise txn_error(retriable=True)

    producer.abort_transaction.side_effect = unanswered
    feed(relay, consumer, [record(3), record(4)], [record(5)], [record(6)])
    with pytest.raises(
        RelayFailed,
        match=r"^could not abort the transaction .*: the transaction coordinator did not answer "
        r"for 30 s",
    ):
        relay.run()
    # The abort that failed, then the stop's, which no longer waits the whole timeout.
    assert [c.args for c in producer.abort_transaction.call_args_list] == [
        (exactly_once.TXN_TIMEOUT,),
        (exactly_once.ABORT_TIMEOUT_UNREACHABLE,),
    ]
    assert producer.produce.call_count == 2  # nothing more while the abort was pending


def test_a_transactional_call_timing_out_while_no_broker_answers_names_the_unreachable_brokers(
    tmp_path: Path,
) -> None:
    relay, consumer, producer, events = make(tmp_path)

    def away(*args: object) -> None:
        events.on_error(KafkaError(KafkaError._ALL_BROKERS_DOWN))
        raise txn_error()

    producer.send_offsets_to_transaction.side_effect = away
    feed(relay, consumer, [record(3), record(4)])
    with pytest.raises(RelayFailed, match=r"could not add the input offsets .*no Kafka broker"):
        relay.run()


def test_a_transactional_call_left_unanswered_while_no_broker_answers_names_the_brokers_first(
    tmp_path: Path,
) -> None:
    # A call can block for its whole limit before the loop's unreachable check has a turn (the
    # brokers went down during it): the cause to act on is that no broker answers.
    relay, consumer, producer, _events = make(tmp_path)
    transactions(relay).call_limit = 0.2
    never = threading.Event()
    producer.send_offsets_to_transaction.side_effect = lambda *a: never.wait()
    consumer.list_topics.side_effect = KafkaException(KafkaError(KafkaError._TRANSPORT))
    feed(relay, consumer, [record(3), record(4)])
    try:
        with pytest.raises(TransactionHung, match=r"^no Kafka broker reachable for 0 s: .*blocks"):
            relay.run()
    finally:
        never.set()
    producer.abort_transaction.assert_not_called()


def test_a_hung_transactional_call_while_brokers_answer_is_named_alone(tmp_path: Path) -> None:
    relay, consumer, producer, _events = make(tmp_path)
    transactions(relay).call_limit = 0.2
    never = threading.Event()
    producer.send_offsets_to_transaction.side_effect = lambda *a: never.wait()
    feed(relay, consumer, [record(3), record(4)])
    try:
        with pytest.raises(TransactionHung, match=r"^the Kafka client call .* still blocks"):
            relay.run()
    finally:
        never.set()
    consumer.list_topics.assert_called_once()  # the brokers were asked, and answered
