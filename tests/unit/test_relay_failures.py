"""Relay failure paths a real broker cannot produce on demand, with spec'd fakes of the clients.

(The relay's normal behaviour is tested against a real broker in tests/integration.)
"""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest.mock import MagicMock

import pytest
from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition
from structlog.testing import capture_logs

from sidecar.errors import RelayFailed
from sidecar.relay import loop
from sidecar.relay.loop import Relay
from tests.unit.relay_fakes import Clock, delivered_message, deliveries, make_relay, record, report


def test_a_failed_delivery_stops_the_relay_and_commits_only_what_came_before(
    tmp_path: Path,
) -> None:
    relay, consumer, producer, _events = make_relay(tmp_path, Clock())
    batches = iter([[record(0), record(1)], [record(2), record(3), record(4)]])
    consumer.consume.side_effect = lambda *a: next(batches, [])

    def poll(timeout: float = 0) -> int:
        callbacks = deliveries(producer)
        if len(callbacks) == 2 and relay.stats.delivered == 0:
            callbacks[0](None, delivered_message())
            callbacks[1](KafkaError(KafkaError._MSG_TIMED_OUT), delivered_message())
        return 0

    producer.poll.side_effect = poll
    with pytest.raises(RelayFailed, match=r"delivery of in\[0\]@2..4 to in.zd failed"):
        relay.run()
    committed = [c.kwargs["offsets"] for c in consumer.commit.call_args_list]
    assert committed and all(tp.offset == 2 for offsets in committed for tp in offsets)
    assert relay.stats.delivered == 2
    consumer.close.assert_called_once()


def test_a_batch_gets_one_report_per_partition_on_its_last_record(tmp_path: Path) -> None:
    relay, _, producer, _events = make_relay(tmp_path, Clock(), partitions={"in": 2, "in.zd": 2})
    one = [record(o, partition=1) for o in (7, 8)]
    relay.relay_batch([record(0), one[0], record(1), one[1], record(2)])
    calls = producer.produce.call_args_list
    assert [c.args[3] for c in calls] == [0, 1, 0, 1, 0]  # each to its input's partition
    carriers = [i for i, c in enumerate(calls) if report(c) is not None]
    assert carriers == [3, 4]  # the last record of partition 1, then of partition 0
    assert relay.state.offsets.awaiting() == 2 and relay.state.offsets.in_flight() == 5
    report(calls[4])(None, delivered_message())  # type: ignore[misc]
    assert {(tp.partition, tp.offset) for tp in relay.state.offsets.to_commit()} == {(0, 3)}
    assert relay.stats.delivered == 3


def test_a_report_later_than_the_message_timeout_stops_the_relay_committing_nothing_of_it(
    tmp_path: Path,
) -> None:
    # Past message.timeout.ms a record before the reported one may have timed out, and
    # enable.gapless.guarantee does not cover timeouts: the report cannot stand for it.
    clock = Clock()
    relay, consumer, producer, _events = make_relay(tmp_path, clock, delivery_timeout=30.0)
    batches = iter([[record(0), record(1)], [record(2), record(3)]])
    consumer.consume.side_effect = lambda *a: next(batches, [])
    served = [0]

    def poll(timeout: float = 0) -> int:
        callbacks = deliveries(producer)
        for callback in callbacks[served[0] :]:
            if served[0] == 1:
                clock.now += 31  # the second batch's report comes late
            callback(None, delivered_message())
            served[0] += 1
        return 0

    producer.poll.side_effect = poll
    with pytest.raises(RelayFailed, match=r"in\[0\]@2..3 .* 31 s after .*timed out unseen"):
        relay.run()
    committed = [c.kwargs["offsets"] for c in consumer.commit.call_args_list]
    assert committed and all(tp.offset == 2 for offsets in committed for tp in offsets)


def test_brokers_unreachable_past_the_timeout_stop_the_relay(tmp_path: Path) -> None:
    clock = Clock()
    relay, consumer, _, events = make_relay(tmp_path, clock)
    consumer.list_topics.side_effect = KafkaException(KafkaError(KafkaError._TRANSPORT))

    def consume(*args: object) -> list[MagicMock]:
        events.on_error(KafkaError(KafkaError._ALL_BROKERS_DOWN))
        clock.now += 30
        return []

    consumer.consume.side_effect = consume
    with pytest.raises(RelayFailed, match=r"no Kafka broker reachable for \d+ s"):
        relay.run()


def test_a_relay_stopping_for_unreachable_brokers_commits_without_waiting_for_an_answer(
    tmp_path: Path,
) -> None:
    clock = Clock()
    relay, consumer, producer, events = make_relay(tmp_path, clock, commit_interval=1e9)
    consumer.list_topics.side_effect = KafkaException(KafkaError(KafkaError._TRANSPORT))
    batches = iter([[record(0), record(1)]])

    def consume(*args: object) -> list[MagicMock]:
        batch = next(batches, None)
        if batch is not None:
            return batch
        events.on_error(KafkaError(KafkaError._ALL_BROKERS_DOWN))
        clock.now += 30
        return []

    def poll(timeout: float = 0) -> int:
        for callback in deliveries(producer)[relay.stats.delivered :]:
            callback(None, delivered_message())
        return 0

    consumer.consume.side_effect = consume
    producer.poll.side_effect = poll
    with pytest.raises(RelayFailed, match="no Kafka broker reachable"):
        relay.run()
    # A synchronous commit could wait for good on brokers that did not come back.
    (commit,) = consumer.commit.call_args_list
    assert commit.kwargs["asynchronous"] is True
    assert [(tp.partition, tp.offset) for tp in commit.kwargs["offsets"]] == [(0, 2)]


def test_a_consumer_close_that_never_returns_does_not_keep_the_stopping_relay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(loop, "UNREACHABLE_CLOSE_LIMIT", 0.2)
    clock = Clock()
    relay, consumer, _, events = make_relay(tmp_path, clock)
    consumer.list_topics.side_effect = KafkaException(KafkaError(KafkaError._TRANSPORT))
    released = threading.Event()
    # librdkafka's close waiting for good on a stuck group coordinator (seen on a real broker).
    consumer.close.side_effect = lambda: released.wait(60)

    def consume(*args: object) -> list[MagicMock]:
        events.on_error(KafkaError(KafkaError._ALL_BROKERS_DOWN))
        clock.now += 30
        return []

    consumer.consume.side_effect = consume
    try:
        with capture_logs() as logs, pytest.raises(RelayFailed, match="no Kafka broker"):
            relay.run()
    finally:
        released.set()
    (hung,) = [e for e in logs if e["event"] == "consumer_close_hung"]
    assert "close the consumer still blocks after 0 s" in hung["error"]
    assert any(e["event"] == "relay_stopped" for e in logs)


def test_an_idle_relay_whose_brokers_came_back_keeps_running(tmp_path: Path) -> None:
    clock = Clock()
    relay, consumer, _, events = make_relay(tmp_path, clock)
    calls = {"n": 0}

    def consume(*args: object) -> list[MagicMock]:
        calls["n"] += 1
        if calls["n"] == 1:
            events.on_error(KafkaError(KafkaError._ALL_BROKERS_DOWN))
        clock.now += 30
        if calls["n"] == 10:
            relay.stop()
        return []

    consumer.consume.side_effect = consume
    stats = relay.run()  # list_topics answers (a MagicMock): the brokers are back
    assert stats.errors == []
    consumer.list_topics.assert_called()


def test_a_fatal_client_error_stops_the_relay(tmp_path: Path) -> None:
    relay, consumer, _, events = make_relay(tmp_path, Clock())
    fatal = MagicMock(spec_set=KafkaError)
    fatal.fatal.return_value = True
    fatal.str.return_value = "producer fenced"
    consumer.consume.side_effect = lambda *a: events.on_error(fatal) or []
    with pytest.raises(RelayFailed, match="fatal Kafka client error: producer fenced"):
        relay.run()


def test_a_full_producer_queue_is_drained_and_the_record_retried(tmp_path: Path) -> None:
    relay, consumer, producer, _events = make_relay(tmp_path, Clock())
    batches = iter([[record(0)]])
    consumer.consume.side_effect = lambda *a: next(batches, None) or relay.stop() or []
    attempts = iter([BufferError("queue full"), BufferError("queue full"), None])

    def produce(*args: object, **kwargs: object) -> None:
        outcome = next(attempts)
        if outcome is not None:
            raise outcome

    producer.produce.side_effect = produce
    stats = relay.run()
    assert stats.queue_full_waits == 2 and stats.produced == 1
    assert producer.produce.call_count == 3


def test_records_from_the_prefetch_queue_do_not_stop_the_unreachable_clock(
    tmp_path: Path,
) -> None:
    clock = Clock()
    relay, consumer, producer, events = make_relay(tmp_path, clock)
    consumer.list_topics.side_effect = KafkaException(KafkaError(KafkaError._TRANSPORT))
    offsets = iter(range(1000))

    def consume(*args: object) -> list[MagicMock]:
        events.on_error(KafkaError(KafkaError._ALL_BROKERS_DOWN))
        clock.now += 30
        return [record(next(offsets))]  # consumed before the broker went away

    consumer.consume.side_effect = consume
    with pytest.raises(RelayFailed, match=r"no Kafka broker reachable for \d+ s"):
        relay.run()
    assert producer.produce.call_count < 5


def test_no_commit_is_attempted_while_no_broker_answers(tmp_path: Path) -> None:
    clock = Clock()
    relay, consumer, producer, events = make_relay(tmp_path, clock)
    consumer.list_topics.side_effect = KafkaException(KafkaError(KafkaError._TRANSPORT))
    batches = iter([[record(0)]])
    consumer.consume.side_effect = lambda *a: next(batches, [])

    def poll(timeout: float = 0) -> int:
        for callback in deliveries(producer)[relay.stats.delivered :]:
            callback(None, delivered_message())
            # The broker goes away right after acknowledging the record.
            events.on_error(KafkaError(KafkaError._ALL_BROKERS_DOWN))
        clock.now += 30
        return 0

    producer.poll.side_effect = poll
    with pytest.raises(RelayFailed, match="no Kafka broker reachable"):
        relay.run()
    # Only the shutdown's commit (of what was acknowledged), none while the loop waited.
    assert consumer.commit.call_count == 1
    producer.flush.assert_called_once_with(5.0)


def test_a_recurring_client_error_is_logged_once_per_interval_with_its_count(
    tmp_path: Path,
) -> None:
    clock = Clock()
    _relay, _, _, events = make_relay(tmp_path, clock)
    refused = KafkaError(KafkaError._TRANSPORT, "Connect to ipv4#127.0.0.1:9092 failed")
    with capture_logs() as logs:
        for _ in range(100):  # a broker away: librdkafka reports each reconnection attempt
            events.on_error(refused)
            clock.now += 0.05
        clock.now += 10
        events.on_error(refused)
    lines = [line for line in logs if line["event"] == "kafka_error"]
    assert [line["repeated"] for line in lines] == [0, 99]
    assert lines[0]["code"] == "_TRANSPORT"


def acknowledge_every_delivery(producer: MagicMock, clock: Clock, step: float = 5.0) -> None:
    """producer.poll serves every report due, and `step` seconds pass per loop turn."""
    served = [0]

    def poll(timeout: float = 0) -> int:
        callbacks = deliveries(producer)
        for callback in callbacks[served[0] :]:
            callback(None, delivered_message())
        served[0] = len(callbacks)
        clock.now += step
        return 0

    producer.poll.side_effect = poll


def test_the_loop_commits_in_the_background_and_counts_a_commit_once_it_is_answered(
    tmp_path: Path,
) -> None:
    clock = Clock()
    relay, consumer, producer, events = make_relay(tmp_path, clock)
    relay.on_assign(consumer, [TopicPartition("in", 0)])
    batches = iter([[record(0), record(1)]])
    consumer.consume.side_effect = lambda *a: next(batches, [])
    acknowledge_every_delivery(producer, clock)

    def commit(offsets: list[TopicPartition], asynchronous: bool) -> None:
        assert asynchronous, "the loop must not wait for a commit"
        events.on_commit(None, offsets)  # librdkafka answers inside a later consume
        relay.stop()

    consumer.commit.side_effect = commit
    stats = relay.run()
    assert stats.commits == 1
    [call] = consumer.commit.call_args_list
    assert [(tp.topic, tp.partition, tp.offset) for tp in call.kwargs["offsets"]] == [("in", 0, 2)]
    consumer.close.assert_called_once()


def test_an_offset_commit_unanswered_past_the_limit_stops_the_relay_without_waiting_on_it(
    tmp_path: Path,
) -> None:
    clock = Clock()
    relay, consumer, producer, _events = make_relay(tmp_path, clock, commit_limit=40.0)
    relay.on_assign(consumer, [TopicPartition("in", 0)])
    batches = iter([[record(0), record(1)]])
    consumer.consume.side_effect = lambda *a: next(batches, [])
    acknowledge_every_delivery(producer, clock)
    consumer.list_topics.return_value = MagicMock()  # brokers answer all along

    with capture_logs() as logs, pytest.raises(RelayFailed, match="still unanswered after 40 s"):
        relay.run()
    # One commit sent, never answered, never sent again; the stuck consumer is left alone.
    [call] = consumer.commit.call_args_list
    assert call.kwargs["asynchronous"] is True
    consumer.close.assert_not_called()
    assert [e["event"] for e in logs if e["log_level"] == "error"] == ["consumer_stuck"]


def big(offset: int) -> MagicMock:
    """A record whose value cannot shrink and exceeds the 70,000 bytes `dead_letter_relay`'s
    output accepts: it is set aside."""
    return record(offset, b"{" + random.Random(offset).randbytes(80_000))


def dead_letter_relay(tmp_path: Path) -> tuple[Any, MagicMock, MagicMock]:
    relay, consumer, producer, _events = make_relay(
        tmp_path,
        Clock(),
        dead_letters={"in": "in.dlq"},
        max_record_bytes={"in.zd": 70_000},
    )
    relay.on_assign(consumer, [TopicPartition("in", 0)])
    return relay, consumer, producer


def targets(producer: MagicMock) -> list[tuple[str, bool]]:
    """Each produce() call: its topic, and whether it carries a report."""
    return [(c.args[0], report(c) is not None) for c in producer.produce.call_args_list]


def test_a_dead_letter_inside_a_batch_has_its_own_report_and_holds_back_the_commit(
    tmp_path: Path,
) -> None:
    relay, _, producer = dead_letter_relay(tmp_path)
    relay.relay_batch([record(0), big(1), record(2)])
    assert targets(producer) == [("in.zd", False), ("in.dlq", True), ("in.zd", True)]
    dead_letter_report, output_report = deliveries(producer)
    assert output_report is not None and dead_letter_report is not None
    output_report(None, delivered_message())  # stands for offsets 0 and 2, not 1
    assert [tp.offset for tp in relay.state.offsets.to_commit()] == [1]
    dead_letter_report(None, delivered_message())
    assert [tp.offset for tp in relay.state.offsets.to_commit()] == [3]
    assert relay.stats.delivered == 3 and relay.stats.dead_letters == 1


def test_when_the_last_record_of_a_batch_is_set_aside_the_next_report_stands_for_the_batch(
    tmp_path: Path,
) -> None:
    relay, _, producer = dead_letter_relay(tmp_path)
    relay.relay_batch([record(0), record(1), big(2)])
    # The report was to ride on offset 2, which went to the dead-letter topic instead.
    assert targets(producer) == [("in.zd", False), ("in.zd", False), ("in.dlq", True)]
    (dead_letter_report,) = deliveries(producer)
    dead_letter_report(None, delivered_message())
    assert relay.state.offsets.to_commit() == []  # 0 and 1 are not known to be delivered yet
    assert relay.state.offsets.in_flight() == 2 and relay.state.offsets.awaiting() == 0
    relay.relay_batch([record(3)])
    assert targets(producer)[-1] == ("in.zd", True)
    deliveries(producer)[-1](None, delivered_message())  # same output partition, in order
    assert [tp.offset for tp in relay.state.offsets.to_commit()] == [4]
    assert relay.stats.delivered == 4


def test_a_record_the_producer_refuses_goes_to_the_dead_letter_topic_and_nothing_is_lost(
    tmp_path: Path,
) -> None:
    relay, _, producer = dead_letter_relay(tmp_path)
    refused = KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))

    def produce(topic: str, *args: object, **kwargs: object) -> None:
        value = args[0] if args else kwargs["value"]
        if topic == "in.zd" and value == b"refused":
            raise refused

    producer.produce.side_effect = produce
    relay.relay_batch([record(0), record(1, b"refused")])
    # Tried on the fast path, once more on the general path, then set aside.
    assert targets(producer) == [
        ("in.zd", False),
        ("in.zd", True),
        ("in.zd", True),
        ("in.dlq", True),
    ]
    deliveries(producer)[-1](None, delivered_message())
    assert relay.state.offsets.to_commit() == []  # offset 0 went without a report
    relay.relay_batch([record(2)])
    deliveries(producer)[-1](None, delivered_message())
    assert [tp.offset for tp in relay.state.offsets.to_commit()] == [3]


def test_records_partitioned_by_key_each_carry_their_own_report(tmp_path: Path) -> None:
    # The output has another partition count: records of one input partition go to several
    # output partitions, whose order says nothing about each other.
    relay, _, producer, _events = make_relay(tmp_path, Clock(), partitions={"in": 1, "in.zd": 3})
    relay.relay_batch([record(0), record(1), record(2)])
    calls = producer.produce.call_args_list
    assert [c.args[3] for c in calls] == [-1, -1, -1]  # the partitioner chooses
    callbacks = deliveries(producer)
    assert len(callbacks) == 3
    callbacks[1](None, delivered_message())
    callbacks[2](None, delivered_message())
    assert relay.state.offsets.to_commit() == []
    callbacks[0](None, delivered_message())
    assert [tp.offset for tp in relay.state.offsets.to_commit()] == [3]


def scripted(relay: Relay, calls: Iterator[Callable[[], list[Any]]]) -> Callable[..., list[Any]]:
    """A consumer's `consume`: each call takes the next step of `calls`; when they run out,
    the relay is stopped and nothing is returned."""

    def consume(*_: object) -> list[Any]:
        step = next(calls, None)
        if step is None:
            relay.stop()
            return []
        return step()

    return consume


def test_records_of_a_partition_lost_while_consuming_are_neither_produced_nor_committed(
    tmp_path: Path,
) -> None:
    # The loop's second consume call serves the rebalance: partition 0 is lost (a stall past
    # max.poll.interval.ms) after the first call took a record from it. Its new owner reads
    # the record again; committing it here would overwrite the new owner's offset.
    relay, consumer, producer, _events = make_relay(
        tmp_path, Clock(), partitions={"in": 2, "in.zd": 2}
    )
    # The consumer's event that says why: it is logged, not dropped with the records.
    max_poll_exceeded = MagicMock(spec_set=Message)
    max_poll_exceeded.error.return_value = KafkaError(KafkaError._MAX_POLL_EXCEEDED)
    max_poll_exceeded.partition.return_value = -1
    calls: Iterator[Callable[[], list[Any]]] = iter(
        [
            list,  # consume(batch_size, 0): nothing there
            lambda: [record(5, partition=0)],  # consume(1, wait): one record
            lambda: (
                relay.on_lost(consumer, [TopicPartition("in", 0)])
                or [max_poll_exceeded, record(9, partition=1)]
            ),
        ]
    )
    consumer.consume.side_effect = scripted(relay, calls)
    answered: set[int] = set()

    def poll(timeout: float = 0) -> int:
        for i, callback in enumerate(deliveries(producer)):
            if i not in answered:
                answered.add(i)
                callback(None, delivered_message())
        return 0

    producer.poll.side_effect = poll
    with capture_logs() as logs:
        relay.run()
    assert "max_poll_interval_exceeded" in [e["event"] for e in logs]
    # produce()'s fourth argument is the output partition (the input's).
    assert [c.args[3] for c in producer.produce.call_args_list] == [1]
    committed = [tp for c in consumer.commit.call_args_list for tp in c.kwargs["offsets"]]
    assert committed and {(tp.partition, tp.offset) for tp in committed} == {(1, 10)}


def test_records_of_a_partition_lost_while_another_is_assigned_in_the_same_call_are_dropped(
    tmp_path: Path,
) -> None:
    # As many partitions held after the second consume call as before it: the drop must not
    # depend on the count.
    relay, consumer, producer, _events = make_relay(
        tmp_path, Clock(), partitions={"in": 3, "in.zd": 3}
    )
    calls: Iterator[Callable[[], list[Any]]] = iter(
        [
            # consume(batch_size, 0): nothing there; partition 2 went earlier.
            lambda: relay.on_lost(consumer, [TopicPartition("in", 2)]) or [],
            lambda: [record(5, partition=0)],  # consume(1, wait): one record
            lambda: (
                relay.on_lost(consumer, [TopicPartition("in", 0)])
                or relay.on_assign(consumer, [TopicPartition("in", 2)])
                or [record(9, partition=1)]
            ),
        ]
    )
    consumer.consume.side_effect = scripted(relay, calls)
    relay.run()
    assert [c.args[3] for c in producer.produce.call_args_list] == [1]


def test_a_lost_partition_leaves_no_lag_series_behind(tmp_path: Path) -> None:
    relay, consumer, _, events = make_relay(tmp_path, Clock(), partitions={"in": 2, "in.zd": 2})
    consumer.subscribe("in", on_assign=relay.on_assign)
    stats = {"topics": {"in": {"partitions": {"0": {"consumer_lag": 7}, "1": {"consumer_lag": 3}}}}}
    events.on_stats(json.dumps(stats))
    lag = relay.state.metrics.registry.get_sample_value
    assert lag("zdict_consumer_lag_records", {"topic": "in", "partition": "0"}) == 7
    relay.on_lost(consumer, [TopicPartition("in", 0)])
    assert lag("zdict_consumer_lag_records", {"topic": "in", "partition": "0"}) is None
    assert lag("zdict_consumer_lag_records", {"topic": "in", "partition": "1"}) == 3
